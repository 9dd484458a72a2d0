"""``Allocation.with_cpusets`` and ``placed`` are hand-written ``attrs.evolve`` calls (the
create path's hot copies): they must copy every other field, whatever fields are added."""

from __future__ import annotations

import attrs

from nri_resmgr.resmgr.cache import Allocation, Kind
from nri_resmgr.resmgr.cpuset import CpuSet
from nri_resmgr.resmgr.model import Container, Pod


def _distinct() -> Allocation:
    """Every field set to a value unlike its default and unlike the others."""
    pod = Pod(id="p", name="pod", namespace="ns")
    return Allocation(
        "cid", "pid", "ns/pod/c", "pool-a", Kind.MIXED, 1500,
        exclusive=CpuSet([3]), isolated=True, cpus=CpuSet([1, 3]), mems=CpuSet([0]),
        keep_mems=True, pod=pod, container=Container(id="cid", pod_id="p", name="c"),
    )  # fmt: skip


def _fields(a: Allocation) -> dict[str, object]:
    return {f.name: getattr(a, f.name) for f in attrs.fields(Allocation)}


def test_with_cpusets_equals_evolve_in_every_field() -> None:
    a = _distinct()
    got = a.with_cpusets(CpuSet([7]), None)
    assert _fields(got) == _fields(attrs.evolve(a, cpus=CpuSet([7]), mems=None))
    assert got.pod is a.pod and got.container is a.container


def test_placed_equals_evolve_in_every_field() -> None:
    a = _distinct()
    got = a.placed("pool-b", CpuSet([5, 6]), False)
    want = attrs.evolve(a, pool="pool-b", exclusive=CpuSet([5, 6]), isolated=False)
    assert _fields(got) == _fields(want)


def test_every_field_is_covered() -> None:
    # A field added to Allocation must be added to the two copies too: this fails first.
    assert [f.name for f in attrs.fields(Allocation)] == [
        "container_id", "pod_id", "name", "pool", "kind", "request", "exclusive",
        "isolated", "cpus", "mems", "keep_mems", "pod", "container",
    ]  # fmt: skip
