"""The hand-written codec field by field: every wire type, the boundaries of varints, the
exact refusals, and the request kinds the generated-code comparisons do not reach.

Expected bytes and values come from the protobuf encoding rules
(https://protobuf.dev/programming-guides/encoding/): a key is ``number << 3 | wire type`` as a
varint, a varint carries 7 bits per byte low first with the top bit set on all but the last,
an int64 goes out as its 64-bit two's complement (ten bytes when negative), a fixed64 is 8
bytes and a fixed32 4; parsers skip fields they do not know, whatever their wire type.
"""

from __future__ import annotations

import pytest
from hypothesis import given

from nri_resmgr._gen.nri.pkg.api import v1alpha1 as api
from nri_resmgr.nri import convert, wire
from nri_resmgr.resmgr.model import Adjustment, ContainerState, Resources, Update
from tests.nri.test_fast_wire import pods


def varint(value: int) -> bytes:
    """Reference encoder, written from the rule rather than taken from the module."""
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def key(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)


def length_delimited(number: int, data: bytes) -> bytes:
    return key(number, 2) + varint(len(data)) + data


def text(number: int, value: str) -> bytes:
    return length_delimited(number, value.encode())


def envelope(*fields: bytes) -> tuple[str, str, bytes, int]:
    return wire.ttrpc_request(b"".join(fields))


# -- reading: field kinds and skipping ---------------------------------------------------


@pytest.mark.parametrize(
    "unknown",
    [
        key(9, 0) + varint(300),  # varint
        key(9, 1) + bytes(8),  # fixed64
        length_delimited(9, b"\x08\x01anything"),  # length-delimited
        key(9, 5) + bytes(4),  # fixed32
        key(16, 0) + varint(1),  # the smallest field number whose key takes two bytes
        key(2047, 1) + bytes(range(8)),
        key(1 << 28, 5) + b"\xff" * 4,  # a five-byte key
    ],
)
def test_unknown_fields_of_every_wire_type_are_skipped(unknown: bytes) -> None:
    known = (text(1, "svc"), text(2, "m"), length_delimited(3, b"\x01\x02"), key(4, 0) + b"\x07")
    for at in range(len(known) + 1):
        got = envelope(*known[:at], unknown, *known[at:])
        assert got == ("svc", "m", b"\x01\x02", 7), at


def test_a_fixed_size_field_may_end_the_message_exactly() -> None:
    assert envelope(text(1, "s"), key(9, 1) + bytes(8)) == ("s", "", b"", 0)
    assert envelope(text(1, "s"), key(9, 5) + bytes(4)) == ("s", "", b"", 0)
    assert envelope(text(1, "s"), length_delimited(9, b"")) == ("s", "", b"", 0)


def test_an_absent_field_reads_as_its_default() -> None:
    assert wire.ttrpc_request(b"") == ("", "", b"", 0)
    assert envelope(key(4, 0) + b"\x00") == ("", "", b"", 0)


def test_a_repeated_scalar_keeps_its_last_value() -> None:
    assert envelope(text(1, "a"), text(1, "b"), key(4, 0) + b"\x01", key(4, 0) + b"\x02") == (
        "b",
        "",
        b"",
        2,
    )


@pytest.mark.parametrize(
    "encoded, value",
    [
        (b"\x7f", 127),  # the largest one-byte varint
        (b"\x80\x01", 128),
        (b"\xff\xff\xff\xff\xff\xff\xff\xff\x7f", (1 << 63) - 1),  # nine bytes
        (b"\x80" * 9 + b"\x01", -(1 << 63)),  # ten bytes: bit 63 set
        (b"\xff" * 9 + b"\x01", -1),
        (b"\xfe" + b"\xff" * 8 + b"\x01", -2),
    ],
)
def test_varints_up_to_ten_bytes_decode_as_int64(encoded: bytes, value: int) -> None:
    assert envelope(key(4, 0) + encoded) == ("", "", b"", value)
    assert varint(value) == encoded  # the reference agrees with the hand-written bytes


@pytest.mark.parametrize(
    "data, message",
    [
        (key(4, 0) + b"\xff" * 10, "varint longer than 10 bytes"),  # ten continuation bytes
        (key(4, 0) + b"\xff" * 9, "truncated varint"),
        (key(4, 0), "truncated varint"),
        (b"\x80", "truncated varint"),  # a key that never ends
        (key(1, 2) + b"\x05ab", "field 1: 5 bytes announced, 2 left"),
        (key(1, 2) + b"\x03abc" + key(2, 2) + b"\x04xyz", "field 2: 4 bytes announced, 3 left"),
        (key(3, 2), "truncated varint"),  # no length at all
        (key(9, 1) + bytes(7), "field 9: truncated fixed-size value"),
        (key(9, 5) + bytes(3), "field 9: truncated fixed-size value"),
        (key(5, 3), "field 5: unsupported wire type 3"),  # groups are not supported
        (key(5, 4), "field 5: unsupported wire type 4"),
        (key(6, 6), "field 6: unsupported wire type 6"),
        (key(7, 7), "field 7: unsupported wire type 7"),
        (b"\x00", "field number 0"),
        (b"\x02\x00", "field number 0"),
        (key(1, 0) + b"\x01", "field 1: expected a length-delimited value, got a varint"),
        (key(4, 2) + b"\x00", "field 4: expected a varint"),
        (key(2, 2) + b"\x01\xff", "field 2: invalid UTF-8"),
        (key(1, 2) + b"\x02\xc3\x28", "field 1: invalid UTF-8"),
        (key(2, 0) + b"\x01", "field 2: expected a length-delimited value, got a varint"),
        (key(3, 0) + b"\x01", "field 3: expected a length-delimited value, got a varint"),
    ],
)
def test_malformed_input_is_refused_with_the_exact_reason(data: bytes, message: str) -> None:
    with pytest.raises(wire.WireError) as caught:
        wire.ttrpc_request(data)
    assert str(caught.value) == message


def test_a_wire_error_is_a_value_error() -> None:
    # Callers translate ValueError at the NRI boundary (handlers._decode).
    assert issubclass(wire.WireError, ValueError)


def test_the_fields_iterator_yields_numbers_and_raw_values() -> None:
    data = key(1, 0) + varint(5) + key(2, 1) + bytes(range(8)) + key(3, 5) + b"abcd"
    data += length_delimited(20, b"xy")
    assert list(wire.fields(data)) == [(1, 5), (2, bytes(range(8))), (3, b"abcd"), (20, b"xy")]


def nest(path: tuple[int, ...], inner: bytes) -> bytes:
    """``inner`` as the body of the sub-message at ``path`` (outermost field first)."""
    for number in reversed(path):
        inner = length_delimited(number, inner)
    return inner


AS_VARINT, AS_LEN = "expected a length-delimited value, got a varint", "expected a varint"
WRONG_TYPE = [
    # (decoder, sub-message path, field, what its wrong-typed value is refused as)
    *[(wire.pod, (), n, AS_VARINT) for n in (1, 2, 3, 4, 5, 6, 8)],
    (wire.pod, (8,), 3, AS_VARINT),  # cgroup_parent
    (wire.pod, (8,), 2, AS_VARINT),  # resources
    (wire.pod, (5,), 1, AS_VARINT),  # a map entry's key
    (wire.pod, (6,), 2, AS_VARINT),  # a map entry's value
    *[(wire.container, (), n, AS_VARINT) for n in (1, 2, 3, 5, 6, 8, 11, 20)],
    (wire.container, (), 4, AS_LEN),  # state
    (wire.container, (), 12, AS_LEN),  # pid
    (wire.container, (11,), 3, AS_VARINT),  # resources
    (wire.container, (20,), 1, AS_VARINT),  # CDIDevice.name
    *[(wire.resources, (), n, AS_VARINT) for n in (1, 2)],
    (wire.resources, (1,), 1, AS_VARINT),  # memory.limit
    (wire.resources, (1, 1), 1, AS_LEN),  # memory.limit.value
    *[(wire.resources, (2,), n, AS_VARINT) for n in (1, 2, 3, 6, 7)],
    *[(wire.resources, (2, n), 1, AS_LEN) for n in (1, 2, 3)],  # the wrappers' value
    (wire.synchronize_request, (), 1, AS_VARINT),
    (wire.synchronize_request, (), 2, AS_VARINT),
    (wire.synchronize_request, (), 3, AS_LEN),
]


@pytest.mark.parametrize("decode, path, number, refusal", WRONG_TYPE)
def test_a_field_of_the_wrong_wire_type_is_refused_by_its_number(
    decode: object, path: tuple[int, ...], number: int, refusal: str
) -> None:
    wrong = key(number, 0) + b"\x01" if refusal == AS_VARINT else length_delimited(number, b"")
    with pytest.raises(wire.WireError) as caught:
        decode(nest(path, wrong))  # type: ignore[operator]
    assert str(caught.value) == f"field {number}: {refusal}"


@pytest.mark.parametrize(
    "decode, path, number",
    [
        *[(wire.pod, (), n) for n in (1, 2, 3, 4)],
        (wire.pod, (8,), 3),
        (wire.pod, (5,), 1),
        (wire.pod, (5,), 2),
        *[(wire.container, (), n) for n in (1, 2, 3, 8)],
        (wire.container, (20,), 1),
        *[(wire.resources, (2,), n) for n in (6, 7)],
    ],
)
def test_invalid_utf8_is_refused_by_its_field_number(
    decode: object, path: tuple[int, ...], number: int
) -> None:
    with pytest.raises(wire.WireError) as caught:
        decode(nest(path, length_delimited(number, b"\xff")))  # type: ignore[operator]
    assert str(caught.value) == f"field {number}: invalid UTF-8"


# -- reading: the NRI messages -----------------------------------------------------------


@given(pods)
def test_pod_events_decode_as_the_generated_code_reads_them(pod: wire.Pod) -> None:
    proto = convert.pod_to_proto(pod)
    for request in (
        api.RunPodSandboxRequest(pod=proto),
        api.StopPodSandboxRequest(pod=proto),
        api.RemovePodSandboxRequest(pod=proto),
    ):
        data = bytes(request)
        expected = convert.pod_from_proto(type(request)().parse(data).pod)
        assert wire.pod_request(data) == expected
        # Unknown fields around the pod change nothing.
        assert wire.pod_request(key(2, 0) + b"\x01" + data + text(3, "x")) == expected


def test_a_pod_sent_in_pieces_merges_and_other_fields_are_not_the_pod() -> None:
    data = length_delimited(1, text(1, "id")) + length_delimited(2, text(2, "not-a-pod"))
    data += length_delimited(1, text(2, "name") + text(4, "ns"))
    pod = wire.pod_request(data)
    assert (pod.id, pod.name, pod.namespace) == ("id", "name", "ns")
    assert wire.pod_request(length_delimited(2, text(1, "other"))).id == ""


def test_an_absent_pod_or_container_reads_as_the_generated_code_reads_it() -> None:
    assert wire.pod(b"") == convert.pod_from_proto(api.PodSandbox())
    assert wire.container(b"") == convert.container_from_proto(api.Container())
    assert wire.pod_and_container(b"") == (wire.pod(b""), wire.container(b""))


def test_a_pods_scalars_and_maps_come_from_their_fields() -> None:
    data = text(1, "id") + text(2, "name") + text(3, "uid") + text(4, "ns")
    data += length_delimited(5, text(1, "l") + text(2, "1"))
    data += length_delimited(6, text(1, "a") + text(2, "2"))
    data += text(7, "runtime-handler-is-not-read")
    pod = wire.pod(data)
    assert (pod.id, pod.name, pod.uid, pod.namespace) == ("id", "name", "uid", "ns")
    assert (pod.labels, pod.annotations) == ({"l": "1"}, {"a": "2"})
    assert (pod.cgroup_parent, pod.resources) == ("", None)


def container_bytes(*fields: bytes) -> bytes:
    return b"".join(fields)


def test_container_scalars_state_and_pid() -> None:
    data = container_bytes(
        text(1, "c1"), text(2, "p1"), text(3, "app"), key(4, 0) + varint(3), key(12, 0) + b"\x07"
    )
    ctr = wire.container(data)
    assert (ctr.id, ctr.pod_id, ctr.name, ctr.pid) == ("c1", "p1", "app", 7)
    assert ctr.state is ContainerState.RUNNING
    assert ctr.resources is None
    assert ctr.cdi_devices == ()


def test_an_unknown_container_state_reads_as_unknown() -> None:
    assert wire.container(key(4, 0) + varint(99)).state is ContainerState.UNKNOWN
    assert wire.container(b"").state is ContainerState.UNKNOWN


def test_a_pid_is_a_uint32() -> None:
    # uint32 on the wire is a varint; bits above 32 are not part of the value.
    assert wire.container(key(12, 0) + varint((1 << 32) + 9)).pid == 9
    assert wire.container(key(12, 0) + varint((1 << 32) - 1)).pid == (1 << 32) - 1


def test_cdi_devices_are_the_names_in_field_20_in_order() -> None:
    dev = [length_delimited(20, text(2, "ignored") + text(1, n)) for n in ("a/b=1", "c/d=2")]
    assert wire.container(b"".join(dev)).cdi_devices == ("a/b=1", "c/d=2")
    assert wire.container(length_delimited(20, b"")).cdi_devices == ("",)


def test_map_entries_default_their_missing_key_or_value_to_empty() -> None:
    entries = [
        length_delimited(5, text(1, "k")),
        length_delimited(5, text(2, "v")),
        length_delimited(5, text(1, "a") + text(2, "b") + key(3, 0) + b"\x01"),
        length_delimited(6, text(2, "x") + text(1, "ann")),
    ]
    ctr = wire.container(b"".join(entries))
    assert ctr.labels == {"k": "", "": "v", "a": "b"}
    assert ctr.annotations == {"ann": "x"}


def wrapped(number: int, value: int) -> bytes:
    return length_delimited(number, key(1, 0) + varint(value))


def linux_resources(cpu: bytes = b"", memory: bytes | None = None) -> bytes:
    out = b"" if memory is None else length_delimited(1, memory)
    return out + length_delimited(2, cpu)


def test_linux_resources_read_every_cpu_and_memory_field() -> None:
    cpu = wrapped(1, 1024) + wrapped(2, -50000) + wrapped(3, 100000)
    cpu += text(6, "0-3") + text(7, "0") + wrapped(4, 5)  # field 4 (realtime) is not read
    res = wire.resources(linux_resources(cpu, memory=wrapped(1, -1) + wrapped(2, 7)))
    assert res == Resources(
        cpu_shares=1024,
        cpu_quota=-50000,
        cpu_period=100000,
        cpuset_cpus="0-3",
        cpuset_mems="0",
        memory_limit=-1,
    )


def test_unsigned_wrappers_stay_unsigned_and_empty_cpusets_are_unset() -> None:
    big = (1 << 64) - 1
    res = wire.resources(linux_resources(wrapped(1, big) + wrapped(3, 1 << 63) + text(6, "")))
    assert (res.cpu_shares, res.cpu_period, res.cpuset_cpus) == (big, 1 << 63, None)
    assert wire.resources(b"") == Resources()
    # A wrapper present but empty is a zero value, not an unset one.
    assert wire.resources(linux_resources(length_delimited(1, b""))).cpu_shares == 0


def test_a_wrapper_value_wider_than_64_bits_keeps_its_low_64_bits() -> None:
    # A ten-byte varint carries 70 bits; protobuf's Python decoder masks it to 64 (Go's
    # refuses it). Kept low, a uint64 stays a uint64 and an int64 an int64.
    wide = key(1, 0) + b"\xff" * 9 + b"\x7f"  # 2**70 - 1
    res = wire.resources(
        linux_resources(length_delimited(1, wide), memory=length_delimited(1, wide))
    )
    assert (res.cpu_shares, res.memory_limit) == ((1 << 64) - 1, -1)


def test_the_last_wrapper_value_wins() -> None:
    res = wire.resources(
        linux_resources(length_delimited(2, key(1, 0) + b"\x05" + key(1, 0) + b"\x06"))
    )
    assert res.cpu_quota == 6


def test_container_resources_come_from_linux_resources_merged_over_pieces() -> None:
    linux_a = length_delimited(3, linux_resources(text(6, "1")))
    linux_b = length_delimited(3, linux_resources(memory=wrapped(1, 64)))
    data = length_delimited(11, text(1, "ignored") + linux_a) + length_delimited(11, linux_b)
    assert wire.container(data).resources == Resources(cpuset_cpus="1", memory_limit=64)
    # A LinuxContainer without resources (here only its cgroups_path, field 5) leaves them unset.
    assert wire.container(length_delimited(11, text(5, "x"))).resources is None


def test_a_pod_reads_its_cgroup_parent_and_resources_from_field_8() -> None:
    linux = text(3, "/kubepods/pod1") + length_delimited(2, linux_resources(text(6, "2")))
    linux += text(1, "ignored")
    pod = wire.pod(text(1, "id") + length_delimited(8, linux))
    assert pod.cgroup_parent == "/kubepods/pod1"
    assert pod.resources == Resources(cpuset_cpus="2")
    assert wire.pod(length_delimited(8, text(3, "/x"))).resources is None


def test_synchronize_more_is_any_nonzero_varint() -> None:
    assert wire.synchronize_request(key(3, 0) + b"\x02") == ([], [], True)
    assert wire.synchronize_request(key(3, 0) + b"\x00") == ([], [], False)
    assert wire.synchronize_request(b"") == ([], [], False)


def test_container_events_take_the_pod_and_container_from_their_fields() -> None:
    pod, ctr = length_delimited(1, text(1, "pod")), length_delimited(2, text(1, "ctr"))
    got_pod, got_ctr = wire.pod_and_container(pod + ctr)
    assert (got_pod.id, got_ctr.id) == ("pod", "ctr")
    # StateChangeEvent carries them as fields 2 and 3 (its field 1 is the event).
    got_pod, got_ctr = wire.pod_and_container(
        key(1, 0)
        + b"\x05"
        + length_delimited(2, text(1, "pod"))
        + length_delimited(3, text(1, "ctr")),
        pod_field=2,
        ctr_field=3,
    )
    assert (got_pod.id, got_ctr.id) == ("pod", "ctr")


# -- writing ------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, (1 << 63) - 1, -1, -(1 << 63)])
def test_varints_are_written_as_protobuf_writes_them(value: int) -> None:
    out = bytearray()
    wire._put_varint(out, value)
    assert bytes(out) == varint(value)
    assert len(out) == (10 if value < 0 else max(1, -(-value.bit_length() // 7)))


def test_an_adjustment_writes_only_the_fields_it_sets() -> None:
    adjustment = Adjustment(cpuset_cpus="0-1", cpu_shares=0, memory_limit=-1)
    cpu = length_delimited(1, b"") + text(6, "0-1")  # a zero wrapper is present and empty
    resources = length_delimited(1, length_delimited(1, key(1, 0) + varint(-1)))
    resources += length_delimited(2, cpu)
    linux = length_delimited(2, resources)
    assert wire.create_container_response(adjustment, []) == length_delimited(
        1, length_delimited(6, linux)
    )
    assert wire.create_container_response(Adjustment(), []) == b""


def test_every_cpu_field_goes_to_its_number() -> None:
    adjustment = Adjustment(cpu_shares=2, cpu_quota=3, cpu_period=4, cpuset_mems="1")
    cpu = wrapped(1, 2) + wrapped(2, 3) + wrapped(3, 4) + text(7, "1")
    resources = length_delimited(2, cpu)
    assert wire.create_container_response(adjustment, []) == length_delimited(
        1, length_delimited(6, length_delimited(2, resources))
    )


def test_updates_carry_id_resources_and_ignore_failure() -> None:
    update = Update(container_id="c", adjustment=Adjustment(cpuset_cpus="3"), ignore_failure=True)
    body = text(1, "c") + length_delimited(
        2, length_delimited(1, length_delimited(2, text(6, "3")))
    )
    body += key(3, 0) + b"\x01"
    assert bytes(wire.updates_field(2, [update])) == length_delimited(2, body)
    quiet = Update(container_id="", adjustment=Adjustment())
    empty_linux = length_delimited(2, length_delimited(1, length_delimited(2, b"")))
    assert bytes(wire.updates_field(1, [quiet, quiet])) == length_delimited(1, empty_linux) * 2
    assert wire.create_container_response(Adjustment(), [quiet]) == length_delimited(2, empty_linux)


def test_a_ttrpc_response_carries_its_payload_in_field_2() -> None:
    assert wire.ttrpc_response(b"\x01\x02") == length_delimited(2, b"\x01\x02")
    assert wire.ttrpc_response(b"") == b""
