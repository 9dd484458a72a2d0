"""The decoder keeps what recent pods and LinuxResources decoded to: the runtime sends the
same pod with every event of its containers. A kept value must be the one a fresh decoding
gives, must not be changeable by whoever got it, and the memory kept is bounded."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from nri_resmgr.nri import wire
from nri_resmgr.resmgr.model import Adjustment, Resources, Update
from tests.nri.test_wire_fields import length_delimited, text, wrapped


def _pod(n: int, labels: bool = True) -> bytes:
    data = text(1, f"pod{n}") + text(2, f"name{n}") + text(4, "ns")
    if labels:
        data += length_delimited(5, text(1, "app") + text(2, f"a{n}"))
        data += length_delimited(6, text(1, "note") + text(2, "x"))
    return data


def test_the_same_pod_bytes_give_the_same_value_as_a_fresh_decoding() -> None:
    data = _pod(1)
    first = wire.pod(data)
    again = wire.pod(bytes(bytearray(data)))  # equal bytes, another object
    assert again is first
    assert again == wire._pod(data)
    assert (dict(first.labels), dict(first.annotations)) == ({"app": "a1"}, {"note": "x"})


def test_a_kept_pods_maps_cannot_be_changed_through_it() -> None:
    pod = wire.pod(_pod(2))
    with pytest.raises(TypeError):
        pod.labels["app"] = "changed"  # type: ignore[index]
    with pytest.raises(TypeError):
        pod.annotations["note"] = "changed"  # type: ignore[index]
    empty = wire.pod(_pod(3, labels=False))
    with pytest.raises(TypeError):
        empty.labels["new"] = "1"  # type: ignore[index]
    assert wire.pod(_pod(2)).labels == {"app": "a2"}


def _fresh_pod_cache(monkeypatch: pytest.MonkeyPatch, size: int) -> Any:
    kept = functools.lru_cache(maxsize=size)(wire._pod)
    monkeypatch.setattr(wire, "_kept_pod", kept)
    return kept


def test_the_pods_kept_are_bounded_oldest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    recent = _fresh_pod_cache(monkeypatch, 3)
    pods = [wire.pod(_pod(n)) for n in range(4)]
    assert recent.cache_info().currsize == 3
    assert wire.pod(_pod(0)) is not pods[0], "the oldest was dropped and decoded again"
    assert wire.pod(_pod(0)) == pods[0]
    assert wire.pod(_pod(3)) is pods[3]


def test_the_same_resources_bytes_give_the_same_value() -> None:
    cpu = wrapped(1, 512) + text(6, "0-3")
    data = length_delimited(1, length_delimited(1, b"\x08\x80\x80\x40")) + length_delimited(2, cpu)
    first = wire.resources(data)
    assert first == Resources(cpu_shares=512, cpuset_cpus="0-3", memory_limit=1 << 20)
    assert wire.resources(bytes(bytearray(data))) is first
    assert wire.resources(b"") is wire._NO_RESOURCES


def test_a_malformed_pod_is_refused_every_time_and_not_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recent = _fresh_pod_cache(monkeypatch, 8)
    data = _pod(9) + b"\x0a\x05ab"  # field 1 announces 5 bytes, 2 follow
    for _ in range(2):
        with pytest.raises(wire.WireError, match="5 bytes announced"):
            wire.pod(data)
    assert recent.cache_info().currsize == 0


@pytest.mark.parametrize(
    "field", ["cpuset_cpus", "cpuset_mems", "cpu_shares", "cpu_quota", "cpu_period", "memory_limit"]
)
def test_an_adjustment_setting_any_one_field_is_not_empty(field: str) -> None:
    value = "0" if field.startswith("cpuset") else 0
    assert not Adjustment(**{field: value}).is_empty()
    assert Adjustment().is_empty()


def test_a_create_reply_with_updates_is_the_adjustment_then_the_updates() -> None:
    adjustment = Adjustment(cpuset_cpus="1")
    updates = [Update("other", Adjustment(cpuset_cpus="2"))]
    reply = wire.create_container_response(adjustment, updates)
    alone = wire.create_container_response(adjustment, [])
    assert reply == alone + bytes(wire.updates_field(2, updates))
    assert wire.create_container_response(Adjustment(), updates) == bytes(
        wire.updates_field(2, updates)
    )


def test_a_long_pod_encoding_is_decoded_each_time_and_not_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recent = _fresh_pod_cache(monkeypatch, 8)
    data = _pod(7) + length_delimited(6, text(1, "big") + text(2, "x" * wire._KEPT_ENCODING_MAX))
    first = wire.pod(data)
    assert first.annotations["big"] == "x" * wire._KEPT_ENCODING_MAX
    assert recent.cache_info().currsize == 0
    assert wire.pod(data) == first and wire.pod(data) is not first
