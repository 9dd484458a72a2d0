"""A CPU priority preference chooses the pool, not only the CPUs inside it (nri-plugins
``resources.go`` supply.GetScore prio capacities, ``pools.go`` compareScores): the cause
of the n4c16 test08-cpuprio-allocation replays failing while the allocator alone was right.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_resmgr.cpus import Priority
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from nri_resmgr.policies.topology_aware.cpuprefs import (
    priority_capacity,
    scoring_priorities,
)
from nri_resmgr.policies.topology_aware.scoring import Ask, PoolScore, best
from nri_resmgr.resmgr.policy import PolicyEnv
from nri_resmgr.sim.synthetic import N4C16, write_sysfs
from nri_resmgr.sim.synthetic_cpu import write_core_kinds, write_cpufreq
from nri_resmgr.sysfs import discover
from tests.policies.workload import Runtime, besteffort, guaranteed, topology_spec

D = "resource-policy.nri.io"
CP = f"prefer-cpu-priority.{D}"
E_CORES = "12-13"
"""One core of NUMA node 3 (CPUs 12-15) is an efficient core; everything else is P."""
SLOW = "2-3,6-7,10-11,14-15"


def _score(pool: int, depth: int, prio: int, shared: int = 3000) -> PoolScore:
    return PoolScore(pool, pool, depth, "numa", 0, shared, shared, 0, prio=prio)


@pytest.mark.parametrize(
    ("prio", "winner"),
    [(Priority.NONE, 1), (Priority.LOW, 0), (Priority.HIGH, 0), (Priority.NORMAL, 1)],
)
def test_high_or_low_priority_capacity_beats_depth(prio: Priority, winner: int) -> None:
    # Pool 0 (a package) still has free CPUs of the priority; pool 1 (a NUMA node) has none.
    scores = [_score(0, depth=1, prio=0), _score(1, depth=2, prio=-1000)]
    assert best(Ask(full=1, prio=prio), scores).pool == winner


def test_normal_priority_capacity_beats_sliceable_capacity_at_equal_depth() -> None:
    scores = [_score(0, 2, prio=-1000, shared=3000), _score(1, 2, prio=0, shared=1000)]
    assert best(Ask(full=1, prio=Priority.NORMAL), scores).pool == 1
    assert best(Ask(full=1), scores).pool == 0


def _hybrid(root: Path) -> None:
    write_sysfs(root, N4C16)
    write_core_kinds(root, str(CpuSet(range(16)) - CpuSet.parse(E_CORES)), E_CORES)


def test_scoring_counts_core_kinds_on_hybrid_and_every_cpu_as_high_otherwise(
    tmp_path: Path,
) -> None:
    _hybrid(tmp_path / "hybrid")
    high, normal, low = scoring_priorities(discover(str(tmp_path / "hybrid")))
    assert (str(high), str(normal), str(low)) == ("0-11,14-15", "0-11,14-15", E_CORES)
    # Not hybrid: the high-priority CPUs upstream scores by are its P-cores, i.e. all.
    write_sysfs(tmp_path / "plain", N4C16)
    write_cpufreq(tmp_path / "plain", {"0-1,4-5,8-9,12-13": 3000000, SLOW: 2000000})
    high, normal, low = scoring_priorities(discover(str(tmp_path / "plain")))
    assert (str(high), str(normal), str(low)) == ("0-15", "", SLOW)


def test_priority_capacity_counts_a_request_for_nothing_as_one_mcpu(tmp_path: Path) -> None:
    _hybrid(tmp_path)
    system = discover(str(tmp_path))
    node3 = CpuSet(range(12, 16))
    assert priority_capacity(system, node3, Priority.LOW, 1, 0) == 1000
    assert priority_capacity(system, node3, Priority.LOW, 0, 0) == 1999
    assert priority_capacity(system, node3, Priority.LOW, 2, 500) == -500
    assert priority_capacity(system, CpuSet(range(4)), Priority.LOW, 0, 200) == -200
    assert priority_capacity(system, CpuSet(range(4)), Priority.NONE, 5, 0) == 0


def _runtime(root: Path, **kw: object) -> Runtime:
    _hybrid(root)
    policy = TopologyAwarePolicy()
    policy.setup(topology_spec(**kw), PolicyEnv(host_root=str(root)))
    return Runtime(policy)


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [(None, "0"), ("low", "12"), ("default", "0"), ("Low", "0"), ("none", "0")],
)
def test_low_priority_guaranteed_container_goes_to_the_node_with_efficient_cores(
    tmp_path: Path, annotation: str | None, expected: str
) -> None:
    # Without a preference an exclusive CPU comes from node 0 (the lowest id; node 2 holds
    # the reserved CPU); a low-priority one from node 3, the only node with E-cores.
    # Upstream matches the annotation's value exactly: "Low" is not a priority.
    rt = _runtime(tmp_path)
    ann = {} if annotation is None else {f"{CP}/container.c0": annotation}
    assert rt.cpus[rt.create(guaranteed("g", 1000, annotations=ann)).id] == expected


@pytest.mark.parametrize(("default", "expected"), [("none", "0-3"), ("low", "12-15")])
def test_default_cpu_priority_steers_shared_containers_pools(
    tmp_path: Path, default: str, expected: str
) -> None:
    # defaultCPUPriority is every non-Guaranteed container's preference in pool choice too.
    rt = _runtime(tmp_path, default_cpu_priority=default)
    assert rt.cpus[rt.create(besteffort("be")).id] == expected


def test_default_annotation_value_is_the_configured_default(tmp_path: Path) -> None:
    rt = _runtime(tmp_path, default_cpu_priority="low")
    ann = {f"{CP}/pod": "default"}
    assert rt.cpus[rt.create(guaranteed("g", 1000, annotations=ann)).id] == "12"
