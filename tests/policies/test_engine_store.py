"""The topology-aware engine is the only writer of its grants, and each of its verbs leaves
the engine consistent by itself: a grant it did not decide (restore, a DRA claim) or an
update the runtime failed to apply is brought in line by the next ``refresh``, with no
caller having to remember to unsettle anything. The rules about a grant's kind are stated
once, on ``Kind``."""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.allocations import Allocation, Kind
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from nri_resmgr.policies.topology_aware.preferences import Want
from nri_resmgr.resmgr.model import Update
from nri_resmgr.resmgr.policy import PolicyEnv
from tests.policies.workload import besteffort, guaranteed, topology_spec
from tests.sysfs.fakesys import Layout, write_sysfs

MACHINE = Layout(packages=1, nodes_per_die=2, cores_per_node=2, threads=1)
"""4 CPUs on two NUMA nodes; CPU 0 reserved."""


def _policy(tmp_path: Path) -> TopologyAwarePolicy:
    p = TopologyAwarePolicy()
    root = write_sysfs(tmp_path, MACHINE)
    p.setup(topology_spec(reserved="cpuset:0"), PolicyEnv(host_root=str(root)))
    return p


def _cpus(updates: list[Update]) -> dict[str, str | None]:
    return {u.container_id: u.adjustment.cpuset_cpus for u in updates}


def test_a_settled_engine_has_nothing_to_refresh(tmp_path: Path) -> None:
    p = _policy(tmp_path)
    p.create_container(*besteffort("a"))
    assert p.engine.refresh() == []


def test_an_adopted_grant_is_brought_in_line_by_the_next_refresh(tmp_path: Path) -> None:
    # A shared grant read back with a cpuset its pool's shared CPUs no longer are: no
    # exclusive CPU moved, so only the adoption itself can make refresh look at it.
    p = _policy(tmp_path)
    pod, ctr = besteffort("a")
    engine = p.engine
    p.create_container(pod, ctr)
    a = engine.allocation(ctr.id)
    assert a is not None and a.cpus is not None
    engine.adopt([a.with_cpusets(CpuSet([0]), a.mems)])
    assert _cpus(engine.refresh()) == {ctr.id: str(a.cpus)}
    assert engine.refresh() == []


def test_adopted_grants_get_memory_zones_at_the_next_refresh(tmp_path: Path) -> None:
    p = _policy(tmp_path)
    engine = p.engine
    pod, ctr = besteffort("a")
    root = engine.pools[0]
    engine.adopt(
        [Allocation(ctr.id, pod.id, "a", root.name, Kind.SHARED, 0, pod=pod, container=ctr)]
    )
    assert engine.memory.zone_of(ctr.id) is None
    engine.refresh()
    assert engine.memory.zone_of(ctr.id) == root.mems


def test_resend_sends_the_cpusets_of_failed_updates_again(tmp_path: Path) -> None:
    p = _policy(tmp_path)
    pod, ctr = besteffort("a")
    adjustment, _ = p.create_container(pod, ctr)
    assert p.engine.refresh() == []
    p.updates_failed([ctr.id])
    assert _cpus(p.engine.refresh()) == {ctr.id: adjustment.cpuset_cpus}


def test_disowning_a_claim_gives_its_cpus_back_to_the_shared_containers(tmp_path: Path) -> None:
    p = _policy(tmp_path)
    engine = p.engine
    pod, ctr = besteffort("a")
    before, _ = p.create_container(pod, ctr)
    assert before.cpuset_cpus == "2-3"  # NUMA node #1
    claim = Allocation("dra-claim:x", "", "claim x", "", Kind.PRESERVE, 0, exclusive=CpuSet([3]))
    engine.adopt([claim])
    assert _cpus(engine.refresh()) == {ctr.id: "2"}
    engine.disown(claim.container_id)
    assert _cpus(engine.refresh()) == {ctr.id: "2-3"}


def test_rolling_back_puts_back_the_grant_held_before(tmp_path: Path) -> None:
    p = _policy(tmp_path)
    engine = p.engine
    pod, ctr = guaranteed("g", 1000)
    p.create_container(pod, ctr)
    held = engine.allocation(ctr.id)
    assert held is not None and held.kind is Kind.EXCLUSIVE
    engine.release(ctr.id)
    engine.grant(ctr.id, pod.id, "g", Want(Kind.SHARED, request=1000))
    assert engine.exclusive_cpus() == CpuSet()
    engine.roll_back(ctr.id, held)
    assert engine.allocation(ctr.id) == held
    assert engine.exclusive_cpus() == held.exclusive


@pytest.mark.parametrize(
    ("kind", "takes_load", "uses_shared", "part"),
    [
        (Kind.SHARED, True, True, 2500),
        (Kind.MIXED, True, True, 500),
        (Kind.EXCLUSIVE, True, False, 0),
        (Kind.RESERVED, False, False, 0),
        (Kind.PRESERVE, False, False, 0),
    ],
)
def test_only_shared_and_mixed_grants_take_from_the_shared_cpus_a_mixed_one_its_fraction(
    kind: Kind, takes_load: bool, uses_shared: bool, part: int
) -> None:
    assert (kind.takes_load, kind.uses_shared, kind.shared_part(2500)) == (
        takes_load,
        uses_shared,
        part,
    )
    grant = Allocation("c", "p", "c", "root", kind, 2500)
    assert grant.shared_part == part
