"""Explicit length boundaries of the hand-written codec (issue 34 item 13): a length prefix is
one varint byte up to 127, two from 128 to 16,383 and three from 16,384; 255/256 cross a byte
of the length's value; the decoder keeps encodings of at most 16 KiB. The property tests in
``test_fast_wire.py`` draw short strings and took minutes to reach a length bug; these are
the boundaries, every one, each checked against the generated classes."""

from __future__ import annotations

import pytest

from nri_resmgr._gen.nri.pkg.api import v1alpha1 as api
from nri_resmgr.nri import convert, wire
from nri_resmgr.resmgr.model import Adjustment, Container, Pod, Resources, Update

BOUNDARIES = (127, 128, 255, 256, 16_383, 16_384, 16_385)


def text(n: int) -> str:
    return ("abcdefghij" * (n // 10 + 1))[:n]


def pod_of_encoded_size(size: int) -> api.PodSandbox:
    """A PodSandbox whose encoding is exactly ``size`` bytes (its name pads it)."""
    for name_length in range(size, 0, -1):
        message = api.PodSandbox(id="p", namespace="ns", name=text(name_length))
        if len(bytes(message)) == size:
            return message
    raise AssertionError(f"no pod encodes to {size} bytes")


@pytest.mark.parametrize("n", BOUNDARIES)
def test_strings_and_maps_at_each_length_boundary_decode_as_generated_code_reads_them(
    n: int,
) -> None:
    pod = Pod("p", text(n), "ns", "u", {"k": text(n)}, {text(n): "v"}, "/kubepods",
              Resources(cpuset_cpus="0-3"))  # fmt: skip
    ctr = Container("c", "p", text(n), labels={"l": text(n)}, annotations={"a": text(n)},
                    resources=Resources(cpuset_cpus=text(n), cpu_shares=2))  # fmt: skip
    data = bytes(api.CreateContainerRequest(
        pod=convert.pod_to_proto(pod), container=convert.container_to_proto(ctr)
    ))  # fmt: skip
    parsed = api.CreateContainerRequest().parse(data)
    decoded = wire.pod_and_container(data)
    assert decoded == (convert.pod_from_proto(parsed.pod),
                       convert.container_from_proto(parsed.container))  # fmt: skip
    assert decoded[0].name == text(n) and decoded[1].resources is not None
    assert decoded[1].resources.cpuset_cpus == text(n)


@pytest.mark.parametrize("size", BOUNDARIES)
def test_a_sub_message_of_each_boundary_size_decodes_and_decodes_again_the_same(
    size: int,
) -> None:
    message = pod_of_encoded_size(size)
    data = bytes(api.RunPodSandboxRequest(pod=message))
    expected = convert.pod_from_proto(api.RunPodSandboxRequest().parse(data).pod)
    # The second decoding of an encoding up to 16 KiB is the kept one.
    assert wire.pod_request(data) == expected
    assert wire.pod_request(data) == expected


@pytest.mark.parametrize("n", BOUNDARIES)
def test_replies_with_values_of_each_length_are_what_generated_code_writes(n: int) -> None:
    adjustment = Adjustment(cpuset_cpus=text(n), cpuset_mems="0")
    updates = [Update(text(n), Adjustment(cpuset_cpus=text(n)))]
    expected = api.CreateContainerResponse(
        adjust=convert.adjustment_to_proto(adjustment),
        update=[convert.update_to_proto(u) for u in updates],
    )
    assert wire.create_container_response(adjustment, updates) == bytes(expected)


@pytest.mark.parametrize("n", BOUNDARIES)
def test_a_length_one_short_of_its_announcement_is_refused(n: int) -> None:
    data = bytes(api.PodSandbox(id=text(n)))
    with pytest.raises(wire.WireError, match="bytes announced"):
        wire.pod(data[:-1])
    with pytest.raises(wire.WireError, match="bytes announced"):
        wire.pod_request(bytes(api.RunPodSandboxRequest(pod=api.PodSandbox(id=text(n))))[:-1])
