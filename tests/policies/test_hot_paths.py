"""The create path's hand-written shortcuts give what the general code gives: the
Allocation copy ``with_cpusets`` equals ``attrs.evolve`` in every field, the cache's
incremental loads equal a recount, ``follow`` (shared Adjustments, identity checks)
equals the update built field by field, and a one-pool machine's choice is the general one."""

from __future__ import annotations

import functools
import random
from pathlib import Path

import attrs
import pytest

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.allocations import (
    Allocation,
    AllocationCache,
    Kind,
    PoolLoad,
    _load_of,
    _plus,
    follow,
)
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy, cpusets
from nri_resmgr.policies.topology_aware.preferences import Want
from nri_resmgr.resmgr.model import Adjustment, Container, Pod, Update
from nri_resmgr.resmgr.policy import PolicyEnv
from tests.policies.workload import besteffort, burstable, guaranteed, topology_spec
from tests.sysfs.fakesys import Layout, write_sysfs


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


def _followed_long_way(
    a: Allocation, cpus: CpuSet | None, mems: CpuSet | None
) -> tuple[Allocation, Update] | None:
    """``follow`` as it was first written: every value built afresh, compared by value."""
    send_cpus = cpus is not None and cpus != a.cpus
    send_mems = mems is not None and mems != a.mems
    if send_cpus and not cpus:
        send_cpus = False
    if not (send_cpus or send_mems):
        return None
    adjustment = Adjustment(
        cpuset_cpus=str(cpus) if send_cpus else None,
        cpuset_mems=str(mems) if send_mems else None,
    )
    applied = attrs.evolve(
        a, cpus=cpus if send_cpus else a.cpus, mems=mems if send_mems else a.mems
    )
    return applied, Update(a.container_id, adjustment)


def test_follow_equals_the_update_built_field_by_field() -> None:
    rng = random.Random(18)
    # Equal sets as distinct objects and as the same object: both must behave alike.
    sets = [None, CpuSet(), CpuSet([0]), CpuSet([0]), CpuSet([0, 1]), CpuSet.parse("0-3,8")]
    for step in range(2000):
        held_cpus, held_mems, cpus, mems = (rng.choice(sets) for _ in range(4))
        a = attrs.evolve(_distinct(), cpus=held_cpus, mems=held_mems)
        got = follow(a, cpus, mems)
        want = _followed_long_way(a, cpus, mems)
        if want is None:
            assert got is None, step
            continue
        assert got is not None, step
        assert _fields(got.applied) == _fields(want[0]), step
        assert got.update == want[1], step


def test_choose_on_a_one_pool_machine_is_the_general_choice(tmp_path: Path) -> None:
    # Engine.choose takes the only pool's fit directly: the same as the general path, for
    # every kind of want, hinted or not, as the pool fills up.
    root = write_sysfs(tmp_path, Layout(packages=1, nodes_per_die=1, cores_per_node=4, threads=1))
    policy = TopologyAwarePolicy()
    policy.setup(topology_spec(reserved="750m"), PolicyEnv(host_root=str(root)))
    engine = policy.engine
    assert len(engine.pools) == 1
    wants = [
        Want(Kind.SHARED),
        Want(Kind.SHARED, request=400, unlimited=True),
        Want(Kind.SHARED, request=1500, limit=2000),
        Want(Kind.EXCLUSIVE, 1, 1000),
        Want(Kind.EXCLUSIVE, 2, 2000, isolated=True),
        Want(Kind.MIXED, 1, 1500),
        Want(Kind.EXCLUSIVE, 9, 9000),
    ]
    outcomes = set()
    for step in range(40):
        for want in wants:
            for hint in (None, engine.pools[0].name, "no-such-pool"):
                general = engine.supply._best_fit(
                    want, hint, None, None, None, engine.supply.usage(), engine.exclusive_cpus()
                )
                assert engine.supply.choose(want, hint) == general, (step, want, hint)
                outcomes.add(general is None)
        pc = besteffort(f"e{step}") if step % 3 else burstable(f"b{step}", 300, 2000)
        engine.grant(pc[1].id, pc[0].id, pc[1].name, wants[step % 4], pod=pc[0], container=pc[1])
    assert outcomes == {True, False}  # both fitting and refused wants were compared


def test_adjustments_are_shared_per_distinct_answer_and_equal_a_fresh_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = write_sysfs(tmp_path, Layout(packages=1, nodes_per_die=2, cores_per_node=4, threads=1))
    policy = TopologyAwarePolicy()
    policy.setup(topology_spec(reserved="750m"), PolicyEnv(host_root=str(root)))
    engine = policy.engine
    creates = [
        besteffort("e0"), besteffort("e1"), burstable("b0", 300, 2000),
        burstable("b1", 300, 2000), guaranteed("g0", 2000), besteffort("e2"),
    ]  # fmt: skip
    seen: dict[Adjustment, Adjustment] = {}
    for pod, ctr in creates:
        adjustment, _ = policy.create_container(pod, ctr)
        a = engine.allocation(ctr.id)
        assert a is not None
        assert adjustment == Adjustment(
            cpuset_cpus=str(a.cpus), cpuset_mems=str(a.mems), cpu_shares=adjustment.cpu_shares
        ), "the cpusets stored for the container are the ones sent"
        assert seen.setdefault(adjustment, adjustment) is adjustment, "one object per answer"
    assert len(seen) >= 3  # besteffort, burstable and the exclusive one differ
    kept = functools.lru_cache(maxsize=2)(cpusets._adjustment.__wrapped__)
    monkeypatch.setattr(cpusets, "_adjustment", kept)
    for pod, ctr in creates:
        policy.remove_container(pod, ctr)
        policy.create_container(pod, ctr)
    assert kept.cache_info().currsize <= 2, "bounded"
