"""The create path's hand-written shortcuts give what the general code gives: the
Allocation copy ``with_cpusets`` equals ``attrs.evolve`` in every field, and the
cache's incremental loads equal a recount."""

from __future__ import annotations

import random

import attrs

from nri_resmgr.resmgr.cache import Allocation, AllocationCache, Kind, PoolLoad, _load_of, _plus
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


def test_every_field_is_covered() -> None:
    # A field added to Allocation must be added to with_cpusets too: this fails first.
    assert [f.name for f in attrs.fields(Allocation)] == [
        "container_id", "pod_id", "name", "pool", "kind", "request", "exclusive",
        "isolated", "cpus", "mems", "keep_mems", "pod", "container",
    ]  # fmt: skip


def _recounted(cache: AllocationCache) -> dict[str, PoolLoad]:
    """Loads summed from scratch with the reference ``_load_of``/``_plus``."""
    out: dict[str, PoolLoad] = {}
    for a in cache:
        if a.kind.takes_load:
            out[a.pool] = _plus(out.get(a.pool, PoolLoad()), _load_of(a))
    return out


def test_incremental_loads_match_a_recount_over_random_puts_and_pops() -> None:
    rng = random.Random(18)
    cache = AllocationCache()
    for step in range(3000):
        cid = f"c{rng.randrange(60)}"
        if rng.random() < 0.3:
            cache.pop(cid)
        else:
            kind = rng.choice(list(Kind))
            request = rng.choice([0, 0, 100, 999, 1000, 1500, 2000])
            exclusive = (
                CpuSet([rng.randrange(8)]) if kind in (Kind.EXCLUSIVE, Kind.MIXED) else CpuSet()
            )
            cache.put(
                Allocation(cid, "p", cid, rng.choice(["a", "b", "c"]), kind, request, exclusive)
            )
        nonzero = {p: load for p, load in cache.loads().items() if load != PoolLoad()}
        assert nonzero == _recounted(cache), step
