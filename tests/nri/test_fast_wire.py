"""The hand-written hot-path codec (nri_resmgr.nri.wire) against the generated classes.

Whatever the generated code reads from some bytes, the fast decoder must read the same; and
the replies the fast encoder writes must be byte for byte what the generated code writes.
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nri_resmgr._gen import ttrpc as envelope
from nri_resmgr._gen.nri.pkg.api import v1alpha1 as api
from nri_resmgr.nri import convert, wire
from nri_resmgr.resmgr.model import (
    Adjustment,
    Container,
    ContainerState,
    DeviceNode,
    Pod,
    Resources,
    Update,
)

text = st.text(max_size=12)
labels = st.dictionaries(text, text, max_size=3)
uint64 = st.integers(0, 2**64 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
cpuset = st.sampled_from([None, "", "0", "0-3,8", "1,3"])


def optional(values: st.SearchStrategy[int]) -> st.SearchStrategy[int | None]:
    return st.one_of(st.none(), values)


resources = st.builds(
    Resources,
    cpu_shares=optional(uint64),
    cpu_quota=optional(int64),
    cpu_period=optional(uint64),
    cpuset_cpus=cpuset,
    cpuset_mems=cpuset,
    memory_limit=optional(int64),
)
adjustments = st.builds(
    Adjustment,
    cpuset_cpus=cpuset,
    cpuset_mems=cpuset,
    cpu_shares=optional(uint64),
    cpu_quota=optional(int64),
    cpu_period=optional(uint64),
    memory_limit=optional(int64),
)
pods = st.builds(
    Pod,
    id=text,
    name=text,
    namespace=text,
    uid=text,
    labels=labels,
    annotations=labels,
    cgroup_parent=text,
    resources=st.one_of(st.none(), resources),
)
containers = st.builds(
    Container,
    id=text,
    pod_id=text,
    name=text,
    state=st.sampled_from(list(ContainerState)),
    labels=labels,
    annotations=labels,
    resources=st.one_of(st.none(), resources),
    pid=st.integers(0, 2**32 - 1),
    claims=st.dictionaries(st.uuids().map(str), cpuset.filter(bool), max_size=2),
    cdi_devices=st.lists(text, max_size=2).map(tuple),
    oom_score_adj=optional(st.integers(-1000, 1000)),
    devices=st.lists(
        st.builds(DeviceNode, type=st.sampled_from(["c", "b", "u"]), major=st.integers(0, 4095),
                  minor=st.integers(0, 2**20), writable=st.booleans()),
        max_size=2, unique_by=lambda d: (d.type, d.major, d.minor),
    ).map(tuple),
)  # fmt: skip
updates = st.builds(Update, container_id=text, adjustment=adjustments, ignore_failure=st.booleans())


def _extras(ctr: api.Container) -> api.Container:
    """Fields the fast decoder skips, so skipping is exercised too."""
    ctr.args = ["sleep", "inf"]
    ctr.mounts = [api.Mount(destination="/data", type="bind", options=["rbind"])]
    ctr.created_at = -5
    ctr.linux.cgroups_path = "/kubepods/x"
    return ctr


@given(pods, containers)
def test_container_event_decodes_as_the_generated_code_reads_it(pod: Pod, ctr: Container) -> None:
    request = api.CreateContainerRequest(
        pod=convert.pod_to_proto(pod), container=_extras(convert.container_to_proto(ctr))
    )
    data = bytes(request)
    parsed = api.CreateContainerRequest().parse(data)
    expected = (convert.pod_from_proto(parsed.pod), convert.container_from_proto(parsed.container))
    assert wire.pod_and_container(data) == expected
    # Both codecs dropping a field would agree: the one kubelet's memory request rides on
    # (oom_score_adj) must make the round trip.
    assert expected[1].oom_score_adj == ctr.oom_score_adj
    # And the device nodes topology hints come from, writable as their cgroup rules say
    # (the rules ride in linux.resources: without resources every device is read-only).
    writable = ctr.resources is not None
    assert expected[1].devices == tuple(
        DeviceNode(d.type, d.major, d.minor, d.writable and writable) for d in ctr.devices
    )


@given(st.lists(pods, max_size=3), st.lists(containers, max_size=3), st.booleans())
def test_synchronize_decodes_as_the_generated_code_reads_it(
    pod_list: list[Pod], ctr_list: list[Container], more: bool
) -> None:
    request = api.SynchronizeRequest(
        pods=[convert.pod_to_proto(p) for p in pod_list],
        containers=[convert.container_to_proto(c) for c in ctr_list],
        more=more,
    )
    parsed = api.SynchronizeRequest().parse(bytes(request))
    assert wire.synchronize_request(bytes(request)) == (
        [convert.pod_from_proto(p) for p in parsed.pods],
        [convert.container_from_proto(c) for c in parsed.containers],
        parsed.more,
    )


@given(adjustments, st.lists(updates, max_size=3))
def test_create_reply_is_what_the_generated_code_writes(
    adjustment: Adjustment, update_list: list[Update]
) -> None:
    expected = api.CreateContainerResponse(
        adjust=convert.adjustment_to_proto(adjustment),
        update=[convert.update_to_proto(u) for u in update_list],
    )
    assert wire.create_container_response(adjustment, update_list) == bytes(expected)


@given(st.lists(updates, max_size=3))
def test_update_lists_are_what_the_generated_code_writes(update_list: list[Update]) -> None:
    expected = api.StopContainerResponse(update=[convert.update_to_proto(u) for u in update_list])
    assert bytes(wire.updates_field(1, update_list)) == bytes(expected)


@given(st.lists(adjustments, min_size=1, max_size=3), st.lists(st.tuples(text, st.integers(0, 2)),
       max_size=8))  # fmt: skip
def test_updates_sharing_adjustment_objects_are_what_the_generated_code_writes(
    shared: list[Adjustment], picks: list[tuple[str, int]]
) -> None:
    # updates_field encodes a run of updates holding one Adjustment object once: runs,
    # interleavings and equal-but-distinct objects must all come out as the generated code.
    update_list = [Update(cid, shared[k % len(shared)]) for cid, k in picks]
    expected = api.StopContainerResponse(update=[convert.update_to_proto(u) for u in update_list])
    assert bytes(wire.updates_field(1, update_list)) == bytes(expected)


@given(text, text, st.binary(max_size=40), int64)
def test_ttrpc_envelope_round_trip(service: str, method: str, payload: bytes, timeout: int) -> None:
    request = envelope.Request(
        service=service,
        method=method,
        payload=payload,
        timeout_nano=timeout,
        metadata=[envelope.KeyValue(key="k", value="v")],
    )
    assert wire.ttrpc_request(bytes(request)) == (service, method, payload, timeout)
    assert wire.ttrpc_response(payload) == bytes(envelope.Response(payload=payload))


def test_repeated_sub_messages_merge_as_protobuf_requires() -> None:
    first = api.Container(id="c", linux=api.LinuxContainer(resources=api.LinuxResources()))
    first.linux.resources.cpu.cpus = "1"
    second = api.Container(linux=api.LinuxContainer(resources=api.LinuxResources()))
    second.linux.resources.memory.limit.value = 7
    data = bytes(api.CreateContainerRequest(container=first)) + bytes(
        api.CreateContainerRequest(container=second)
    )
    _, ctr = wire.pod_and_container(data)
    assert ctr.resources == Resources(cpuset_cpus="1", memory_limit=7)
    assert ctr.id == "c"


@pytest.mark.parametrize(
    "data, problem",
    [
        (b"\x0a\x05ab", "bytes announced"),
        (b"\x08\xff", "truncated varint"),
        (b"\x0b", "wire type"),
        (b"\x00\x01", "field number 0"),
        (b"\x08" + b"\xff" * 11, "longer than 10 bytes"),
        (b"\x0a\x02\xff\xfe", "UTF-8"),
        (b"\x0d\x01\x02", "fixed-size"),
    ],
)
def test_malformed_bytes_raise_a_wire_error_naming_the_problem(data: bytes, problem: str) -> None:
    with pytest.raises(wire.WireError, match=problem):
        wire.ttrpc_request(data)


@given(st.binary(max_size=64))
def test_arbitrary_bytes_raise_nothing_but_wire_error(data: bytes) -> None:
    for decode in (wire.pod_and_container, wire.synchronize_request, wire.ttrpc_request):
        # Anything but WireError (IndexError, UnicodeDecodeError, ...) fails the test.
        with contextlib.suppress(wire.WireError):
            decode(data)
