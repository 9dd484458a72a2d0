"""Restart → new policy → Synchronize with the running containers → the same placement."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from nri_resmgr.resmgr.model import ContainerState, Resources
from nri_resmgr.resmgr.policy import PolicyEnv
from tests.policies.workload import (
    Runtime,
    besteffort,
    burstable,
    guaranteed,
    start,
    topology_spec,
)
from tests.sysfs.fakesys import TOPOLOGIES

P = "resource-policy.nri.io"


def mixed_workload(rt: Runtime) -> None:
    rt.create(besteffort("be0"))
    rt.create(guaranteed("g1", 1000))
    rt.create(guaranteed("g2", 2000))
    rt.create(burstable("bu", 300, 1000))
    rt.create(guaranteed("m1", 1500))
    rt.create(guaranteed("m2", 1200))
    rt.create(besteffort("sys", namespace="kube-system"))
    rt.create(guaranteed("sh", 500))
    rt.create(besteffort("be1"))
    rt.create(guaranteed("pres", 1000, annotations={f"cpu.preserve.{P}": "true"}))


def placements(p: TopologyAwarePolicy) -> dict[str, tuple[str, str, str]]:
    return {
        a.container_id: (a.pool, a.kind.value, str(a.exclusive)) for a in p.engine.allocations()
    }


@pytest.mark.parametrize("topology", sorted(TOPOLOGIES))
def test_restart_keeps_placement(tmp_path: Path, topology: str) -> None:
    layout = TOPOLOGIES[topology]
    spec = topology_spec(reserved="cpuset:0")
    old = TopologyAwarePolicy()
    start(old, tmp_path, layout, spec)
    rt = Runtime(old)
    mixed_workload(rt)

    new = TopologyAwarePolicy()
    new.setup(spec, PolicyEnv(host_root=str(tmp_path)))
    pods, containers = rt.reported()
    assert new.synchronize(pods, containers) == []  # nothing to change on the runtime
    assert placements(new) == placements(old)
    # The restored view of every container is what the runtime holds.
    held = {cid: (_parsed(rt.cpus[cid]), _parsed(rt.mems[cid])) for cid in rt.cpus}
    assert {a.container_id: (a.cpus, a.mems) for a in new.engine.allocations()} == held

    # Both instances now make the same decisions: the restored state is the real state.
    victim = next(c for c in rt.containers.values() if c.id.startswith("g1"))
    pod = rt.pods[victim.pod_id]
    assert new.stop_container(pod, victim) == old.stop_container(pod, victim)
    follow_up = guaranteed("g3", 1000)
    assert new.create_container(*follow_up) == old.create_container(*follow_up)
    assert placements(new) == placements(old)


def _parsed(text: str | None) -> CpuSet | None:
    return None if text is None else CpuSet.parse(text)


def test_restart_repins_unpinned_and_drops_stopped(tmp_path: Path) -> None:
    spec = topology_spec()
    old = TopologyAwarePolicy()
    start(old, tmp_path, TOPOLOGIES["n4c16"], spec)
    rt = Runtime(old)
    g = rt.create(guaranteed("g", 1000))
    be = rt.create(besteffort("be"))
    pods, containers = rt.reported()
    # The BestEffort container lost its cpuset (it was created while we were down) and a
    # stopped container is still listed.
    containers = [
        attrs.evolve(c, resources=attrs.evolve(c.resources or Resources(), cpuset_cpus=None))
        if c.id == be.id
        else c
        for c in containers
    ]
    stopped_pod, stopped = guaranteed("old", 4000)
    stopped = attrs.evolve(stopped, state=ContainerState.STOPPED)
    new = TopologyAwarePolicy()
    new.setup(spec, PolicyEnv(host_root=str(tmp_path)))
    updates = new.synchronize([*pods, stopped_pod], [*containers, stopped])
    assert [u.container_id for u in updates] == [be.id]
    assert updates[0].adjustment.cpuset_cpus == "8-11"  # the roomiest pool, away from g
    assert new.engine.allocation(g.id) is not None
    assert new.engine.allocation(stopped.id) is None


def test_restart_with_conflicting_cpusets_reallocates(tmp_path: Path) -> None:
    spec = topology_spec()
    p = TopologyAwarePolicy()
    start(p, tmp_path, TOPOLOGIES["n4c16"], spec)
    pa, a = guaranteed("a", 1000)
    pb, b = guaranteed("b", 1000)
    from tests.policies.workload import running

    # Both claim CPU 5 exclusively (e.g. a stale cpuset): neither can be trusted, both move
    # to CPUs of their own.
    updates = p.synchronize([pa, pb], [running(a, "5", "1"), running(b, "5", "1")])
    assert sorted(u.container_id for u in updates) == sorted([a.id, b.id])
    got = [CpuSet.parse(u.adjustment.cpuset_cpus or "") for u in updates]
    # One exclusive CPU each (a CpuSet, so "5-6" counts as two), and not the same one.
    assert [len(g) for g in got] == [1, 1] and got[0].isdisjoint(got[1])


def test_reconfigure_keeps_running_containers(tmp_path: Path) -> None:
    p = TopologyAwarePolicy()
    start(p, tmp_path, TOPOLOGIES["n4c16"], topology_spec())
    rt = Runtime(p)
    mixed_workload(rt)
    before = placements(p)
    assert p.reconfigure(topology_spec(pin_memory=True)) == []
    assert placements(p) == before
    # Taking CPUs 4-7 away moves what was there.
    updates = p.reconfigure(topology_spec(available="exclude-cpuset:4-7"))
    rt.apply(updates)
    assert updates
    gone = CpuSet.parse("4-7")
    for cid, cpus in rt.cpus.items():
        if cpus is not None:  # the preserved container is left alone
            assert CpuSet.parse(cpus).isdisjoint(gone), (cid, cpus)
