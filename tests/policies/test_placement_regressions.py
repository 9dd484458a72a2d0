"""Regressions of issue 12, read from what the runtime holds (the in-repo ``Runtime`` drops an
empty cpuset as the wire encoder does, so "unpinned" shows as ``None``).

1. An exclusive grant never empties a busy shared pool or the root (an idle pool may be sliced
   empty, as nri-plugins does), and a restart keeps such grants.
2. Re-placement must not depend on the order containers are listed in.
3. The policy's view of each container's cpuset must be what the runtime applied.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

from nri_resmgr.cpus.errors import PlacementError
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.errors import ConfigError
from nri_resmgr.policies.allocations import Allocation, Kind
from nri_resmgr.policies.balloons import BalloonsPolicy
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from nri_resmgr.resmgr.manager import ResourceManager
from nri_resmgr.resmgr.model import Container, Update
from nri_resmgr.resmgr.policy import PolicyEnv
from tests.policies.workload import (
    Runtime,
    balloons_spec,
    besteffort,
    burstable,
    guaranteed,
    resources,
    running,
    start,
    topology_spec,
)
from tests.sysfs.fakesys import ONE_SOCKET_4CPU, Layout, write_sysfs

TWO_CPUS = Layout(cores_per_node=2)
TWO_NODES_OF_TWO = Layout(nodes_per_die=2, cores_per_node=2)


def policy(tmp_path: Path, layout: Layout, **spec: Any) -> TopologyAwarePolicy:
    p = TopologyAwarePolicy()
    start(p, tmp_path, layout, topology_spec(**spec))
    return p


def assert_all_pinned(rt: Runtime) -> None:
    for cid, cpus in rt.cpus.items():
        assert cpus, f"{cid} runs unpinned (on every CPU)"


def assert_view_is_runtime(p: TopologyAwarePolicy, rt: Runtime) -> None:
    for a in p.engine.allocations():
        assert (a.cpus, a.mems) == (
            CpuSet.parse(rt.cpus[a.container_id] or ""),
            CpuSet.parse(rt.mems[a.container_id] or ""),
        ), a.name


# -- 1. a busy shared pool (and the root) never goes empty -------------------------------------


@pytest.mark.parametrize(
    ("layout", "reserved", "milli"),
    [(TWO_CPUS, "750m", 1000), (ONE_SOCKET_4CPU, "cpuset:0", 3000)],
)
def test_an_exclusive_grant_never_takes_the_last_shared_cpu_of_an_idle_pool(
    tmp_path: Path, layout: Layout, reserved: str, milli: int
) -> None:
    # The only pool is the root, which always keeps a shared CPU (nri-plugins would slice it
    # empty and leave the others unpinned): the container shares.
    p = policy(tmp_path, layout, reserved=reserved)
    rt = Runtime(p)
    g = rt.create(guaranteed("g", milli))
    be = rt.create(besteffort("be"))
    bu = rt.create(burstable("bu", 100, 200))
    assert_all_pinned(rt)
    shared = str(p.engine.supply.shared_cpus(0))
    assert rt.cpus[g.id] == rt.cpus[be.id] == rt.cpus[bu.id] == shared
    a = p.engine.allocation(g.id)
    assert a is not None and a.kind is Kind.SHARED and not a.exclusive


def test_exclusive_cpus_from_a_socket_never_empty_a_busy_numa_node(tmp_path: Path) -> None:
    # Pools: socket {0-3}, node #0 {0,1}, node #1 {2,3}; CPU 0 reserved. The BestEffort
    # container goes to node #1 (more room). A 2-CPU request fits no node; the socket slices
    # the idle node #0 empty (nri-plugins SliceableCPUs) and one CPU of node #1, whose
    # BestEffort keeps the other.
    p = policy(tmp_path, TWO_NODES_OF_TWO, reserved="cpuset:0")
    rt = Runtime(p)
    be = rt.create(besteffort("be"))
    assert rt.cpus[be.id] == "2-3"
    g = rt.create(guaranteed("g", 2000))
    assert_all_pinned(rt)
    a = p.engine.allocation(g.id)
    assert a is not None and a.kind is Kind.EXCLUSIVE and a.pool == "socket #0"
    assert 1 in a.exclusive and len(a.exclusive & CpuSet.parse("2-3")) == 1
    assert len(p.engine.supply.shared_cpus(p.engine.supply.index["NUMA node #1"])) == 1
    assert rt.cpus[be.id] == str(p.engine.supply.shared_cpus(p.engine.supply.index["NUMA node #1"]))


def test_with_no_shared_cpu_at_all_creation_fails_naming_the_container(tmp_path: Path) -> None:
    # Every allowed CPU is reserved or isolated: nothing can be given to a default container.
    layout = Layout(cores_per_node=2, isolated="1")
    p = policy(tmp_path, layout, reserved="cpuset:0")
    with pytest.raises(PlacementError, match=r"default/be/c0: no shared CPU"):
        p.create_container(*besteffort("be"))
    assert p.engine.allocations() == []


@pytest.mark.parametrize("pin_cpu", [True, False])
def test_a_reserved_overflow_with_no_shared_cpu_at_all_fails_naming_the_container(
    tmp_path: Path, pin_cpu: bool
) -> None:
    # The one allowed CPU is the reserved one. A kube-system request beyond it falls back to
    # normal shared CPUs, of which there are none: it is refused, as a default container is
    # (pinned or not), never granted an empty shared set that a restart or a reconfiguration
    # then cannot place again.
    p = policy(
        tmp_path, TWO_CPUS, reserved="cpuset:1", available="exclude-cpuset:0", pin_cpu=pin_cpu
    )
    rt = Runtime(p)
    ks = rt.create(guaranteed("ks", 250, namespace="kube-system"))
    assert rt.cpus[ks.id] == ("1" if pin_cpu else None)
    with pytest.raises(PlacementError, match=r"kube-system/big/c0: no shared CPU"):
        p.create_container(*guaranteed("big", 1500, namespace="kube-system"))
    with pytest.raises(PlacementError, match=r"kube-system/ks/c0: no shared CPU"):
        p.update_container(rt.pods[ks.pod_id], ks, resources(1500, 1500))
    assert [(a.container_id, a.kind) for a in p.engine.allocations()] == [(ks.id, Kind.RESERVED)]


def test_a_reconfiguration_leaving_a_reserved_overflow_no_shared_cpu_is_refused(
    tmp_path: Path,
) -> None:
    # Found by the state machine: kube-system asks more than the reserved CPU 0 holds and
    # runs on the shared CPU 1 (unpinned: pinCPU off). The new configuration allows only
    # CPU 1 and reserves it, so there is no shared CPU left for it; it was accepted with the
    # container kept as an unpinned shared grant.
    p = policy(tmp_path, TWO_CPUS, reserved="cpuset:0", pin_cpu=False)
    rt = Runtime(p)
    ks = rt.create(guaranteed("ks", 1500, namespace="kube-system"))
    assert _allocation(p, ks.id).kind is Kind.SHARED
    engine = p.engine
    new = topology_spec(reserved="cpuset:1", available="exclude-cpuset:0")
    with pytest.raises(ConfigError, match=r"kube-system/ks/c0: no shared CPU"):
        p.reconfigure(new)
    assert p.engine is engine  # the old configuration stays


# -- 2. re-placement is independent of container order -------------------------------------


def test_synchronize_places_the_same_whatever_the_order(tmp_path: Path) -> None:
    # Both containers share CPU 1; after a restart with CPU 1 reserved instead of CPU 0, the
    # Guaranteed one must not grab the last CPU just because the runtime listed it first.
    old = policy(tmp_path, TWO_CPUS, reserved="cpuset:0")
    rt = Runtime(old)
    rt.create(besteffort("be"))
    rt.create(guaranteed("g", 1000))
    pods, containers = rt.reported()
    results = []
    for order in (containers, containers[::-1]):
        new = TopologyAwarePolicy()
        new.setup(topology_spec(reserved="cpuset:1"), PolicyEnv(host_root=str(tmp_path)))
        updates = new.synchronize(pods, order)
        got = {u.container_id: u.adjustment.cpuset_cpus for u in updates}
        assert got == {c.id: "0" for c in containers}
        results.append(
            sorted((a.container_id, a.kind, str(a.exclusive)) for a in new.engine.allocations())
        )
    assert results[0] == results[1]


@pytest.mark.parametrize("kube_system", [False, True])
def test_a_restart_tells_a_mixed_containers_own_cpu_by_a_witness_of_an_overlapping_pool(
    tmp_path: Path, kube_system: bool
) -> None:
    # Found by the state machine. The mixed container of NUMA node #1 (CPUs 4-7) owns CPU 5;
    # no other container of that node witnesses which of its CPUs are shared, but the shared
    # container of the socket runs on 4, 6 and 7: CPU 5 is the own one. A restart that
    # picked CPU 4 instead moved the socket's container onto CPU 5. The witness may be a
    # kube-system container that fell back to shared CPUs (the reserved CPU holds 750m).
    layout = Layout(nodes_per_die=2, cores_per_node=2, threads=2, isolated="0")
    p = policy(tmp_path, layout, reserved="750m", pin_memory=False)
    mixed_pod, mixed = guaranteed("mixed", 1500)
    if kube_system:
        shared_pod, shared = guaranteed("shared", 1500, namespace="kube-system")
    else:
        shared_pod, shared = burstable("shared", 1500, None)
    updates = p.synchronize(
        [mixed_pod, shared_pod], [running(mixed, "4-7", None), running(shared, "2-4,6-7", None)]
    )
    assert updates == []
    assert _claim(p, mixed.id) == (Kind.MIXED, "5")


def test_restore_of_a_mixed_workload_is_order_independent(tmp_path: Path) -> None:
    layout = Layout(packages=2, nodes_per_die=2, cores_per_node=2, threads=2)
    old = policy(tmp_path, layout, reserved="cpuset:0")
    rt = Runtime(old)
    for i, milli in enumerate([1000, 2000, 1500, 500, 3000, 1000]):
        rt.create(guaranteed(f"g{i}", milli))
        rt.create(besteffort(f"be{i}"))
    pods, containers = rt.reported()
    seen = set()
    rng = random.Random(12)
    for _ in range(4):
        order = list(containers)
        rng.shuffle(order)
        new = TopologyAwarePolicy()
        new.setup(topology_spec(reserved="cpuset:2"), PolicyEnv(host_root=str(tmp_path)))
        updates = new.synchronize(pods, order)
        seen.add(
            (
                tuple(sorted((u.container_id, str(u.adjustment)) for u in updates)),
                tuple(
                    sorted(
                        (a.container_id, a.pool, a.kind, str(a.exclusive))
                        for a in new.engine.allocations()
                    )
                ),
            )
        )
    assert len(seen) == 1


# -- 3. the policy's view follows the runtime ----------------------------------------------


def test_reserved_cpu_round_trip_keeps_every_container_pinned(tmp_path: Path) -> None:
    p = policy(tmp_path, TWO_CPUS, reserved="cpuset:0")
    rt = Runtime(p)
    rt.create(guaranteed("g", 1000))
    rt.create(besteffort("be"))
    for reserved in ("cpuset:1", "cpuset:0"):
        rt.apply(p.reconfigure(topology_spec(reserved=reserved)))
        assert_all_pinned(rt)
        assert_view_is_runtime(p, rt)
    late = rt.create(besteffort("late"))
    assert rt.cpus[late.id] == "1"  # of two CPUs, the one not reserved
    assert_all_pinned(rt)
    assert_view_is_runtime(p, rt)


class _RefusingRuntime:
    async def update_containers(self, updates: Sequence[Update]) -> list[Update]:
        return list(updates)


async def test_an_update_the_runtime_did_not_apply_is_not_believed_and_is_sent_again(
    tmp_path: Path,
) -> None:
    write_sysfs(tmp_path, ONE_SOCKET_4CPU)
    p = TopologyAwarePolicy()
    manager = ResourceManager(p, topology_spec(reserved="cpuset:0"), PolicyEnv(str(tmp_path)))
    manager.attach_runtime(_RefusingRuntime())
    be_pod, be = besteffort("be")
    async with manager.lock:
        manager.create_container(be_pod, be)
    updates = await manager.reconfigure(topology_spec(reserved="cpuset:3"))
    assert [(u.container_id, u.adjustment.cpuset_cpus) for u in updates] == [(be.id, "0-2")]
    a = p.engine.allocation(be.id)
    assert a is not None and a.cpus is None  # the runtime still has 1-3, not 0-2
    async with manager.lock:
        _, again = manager.create_container(*besteffort("next"))
    assert [(u.container_id, u.adjustment.cpuset_cpus) for u in again] == [(be.id, "0-2")]


# -- found by the state machine (tests/policies/test_state_machine.py) ----------------------


def test_an_update_under_pin_memory_off_keeps_the_mems_the_runtime_has(tmp_path: Path) -> None:
    p = policy(tmp_path, TWO_NODES_OF_TWO, reserved="750m")
    rt = Runtime(p)
    pod_, c = guaranteed("g", 250)
    rt.create((pod_, c))
    rt.apply(p.reconfigure(topology_spec(reserved="750m", pin_cpu=False, pin_memory=False)))
    rt.apply(p.update_container(pod_, c, resources(500, 500)))
    assert_view_is_runtime(p, rt)
    assert rt.mems[c.id] is not None  # still what it was given, and the policy knows it


def test_a_restart_keeps_exclusive_cpus_that_sliced_an_idle_node_empty(tmp_path: Path) -> None:
    # Three NUMA nodes of one 2-thread core each. The socket's shared Burstable leaves the
    # 2-CPU Guaranteed container no node of its own, so it is granted at the socket and takes
    # the idle node #2 whole (nri-plugins' SliceableCPUs). A restart read that claim as
    # "empties a pool", re-placed the container as shared there and moved the Burstable
    # from 1-3 to 1-5 (seed 1 of the state machine).
    layout = Layout(nodes_per_die=3, cores_per_node=1, threads=2)
    p = policy(tmp_path, layout, reserved="750m", pin_memory=False, unlimited_burstable="package")
    rt = Runtime(p)
    rt.create(guaranteed("g1", 250))
    bu = rt.create(burstable("bu", 250))
    g2 = rt.create(guaranteed("g2", 2000))
    assert _claim(p, g2.id) == (Kind.EXCLUSIVE, "4-5")
    assert rt.cpus[bu.id] == "1-3"
    before = dict(rt.cpus)
    pods, containers = rt.reported()
    fresh = TopologyAwarePolicy()
    fresh.setup(p.engine.spec, PolicyEnv(host_root=str(tmp_path)))
    rt.apply(fresh.synchronize(pods, containers))
    assert rt.cpus == before
    assert _claim(fresh, g2.id) == (Kind.EXCLUSIVE, "4-5")


def test_a_restart_keeps_a_kube_system_container_on_the_shared_cpus_it_fell_back_to(
    tmp_path: Path,
) -> None:
    # The reserved CPU's 750m were taken when ks2 came, so it went to the shared CPU 1. Once
    # ks1 is gone there is room on the reserved CPU, but a restart must keep ks2 where it
    # runs (restore granted it afresh, onto CPU 0: state machine, seed 11).
    p, rt, ks2 = _kube_system_fallen_back_to_shared(tmp_path)
    pods, containers = rt.reported()
    fresh = TopologyAwarePolicy()
    fresh.setup(p.engine.spec, PolicyEnv(host_root=str(tmp_path)))
    rt.apply(fresh.synchronize(pods, containers))
    assert rt.cpus[ks2.id] == "1"
    # Where it can no longer stay (on a CPU the machine no longer has), it is granted what it
    # asks for: the reserved CPU.
    _, [running] = rt.reported()
    elsewhere = attrs.evolve(running, resources=attrs.evolve(running.resources, cpuset_cpus="7"))
    again = TopologyAwarePolicy()
    again.setup(p.engine.spec, PolicyEnv(host_root=str(tmp_path)))
    [update] = again.synchronize(pods, [elsewhere])
    assert update.adjustment.cpuset_cpus == "0"


def test_a_new_reserved_set_moves_kube_system_onto_it_and_the_others_off_it(
    tmp_path: Path,
) -> None:
    # The real containerd's reconfiguration test: the old reserved CPU becomes the shared
    # one. Judged by its cpus alone, the kube-system container looked as if it had fallen
    # back to shared CPUs and stayed on CPU 0.
    p = policy(tmp_path, TWO_CPUS, reserved="cpuset:0", pin_memory=False)
    rt = Runtime(p)
    ks = rt.create(besteffort("ks", namespace="kube-system"))
    be = rt.create(besteffort("be"))
    assert (rt.cpus[ks.id], rt.cpus[be.id]) == ("0", "1")
    rt.apply(p.reconfigure(topology_spec(reserved="cpuset:1", pin_memory=False)))
    assert (rt.cpus[ks.id], rt.cpus[be.id]) == ("1", "0")
    assert _allocation(p, ks.id).kind is Kind.RESERVED


def test_a_reconfiguration_keeps_a_fallen_back_kube_system_container_where_it_runs(
    tmp_path: Path,
) -> None:
    p, rt, ks2 = _kube_system_fallen_back_to_shared(tmp_path)
    rt.apply(p.reconfigure(topology_spec(reserved="750m", pin_memory=False)))
    assert rt.cpus[ks2.id] == "1"
    assert _allocation(p, ks2.id).kind is Kind.SHARED


def _kube_system_fallen_back_to_shared(
    tmp_path: Path,
) -> tuple[TopologyAwarePolicy, Runtime, Container]:
    """The reserved CPU's 750m were taken when ks2 came, so it went to the shared CPU 1;
    then ks1 left, so there is room on the reserved CPU now."""
    p = policy(tmp_path, TWO_CPUS, reserved="750m", pin_memory=False)
    rt = Runtime(p)
    ks1 = rt.create(guaranteed("ks1", 1000, namespace="kube-system"))
    ks2 = rt.create(guaranteed("ks2", 250, namespace="kube-system"))
    assert (rt.cpus[ks1.id], rt.cpus[ks2.id]) == ("0", "1")
    rt.remove(ks1)
    return p, rt, ks2


def _allocation(p: TopologyAwarePolicy, container_id: str) -> Allocation:
    a = p.engine.allocation(container_id)
    assert a is not None
    return a


def _claim(p: TopologyAwarePolicy, container_id: str) -> tuple[Kind, str]:
    a = _allocation(p, container_id)
    return a.kind, str(a.exclusive)


def test_balloons_reserved_cpus_moved_under_a_balloon_re_place_its_members(
    tmp_path: Path,
) -> None:
    p = BalloonsPolicy()
    start(p, tmp_path, Layout(packages=3, cores_per_node=1, threads=2), balloons_spec("1"))
    rt = Runtime(p)
    c = rt.create(guaranteed("d", 250))
    # The reserved balloon holds CPU 0; the default balloon packs next to it (the fullest
    # subtree that still fits: the sibling thread of core 0), so CPU 1.
    assert rt.cpus[c.id] == "1"
    rt.apply(p.reconfigure(balloons_spec("2")))  # the reserved balloon grows to 2 CPUs
    (reserved,) = [b for b in p.state.balloons if b.type.name == "reserved"]
    assert len(reserved.cpus) == 2
    assert CpuSet.parse(rt.cpus[c.id] or "").isdisjoint(reserved.cpus)
    assert rt.cpus[c.id]


# Containers no longer fall back to the default balloon when their type cannot take them:
# their creation fails with upstream's reason (tests/policies/test_balloons.py), so the
# restore of such fallbacks has nothing left to keep.


def test_a_restart_keeps_a_guaranteed_container_shared_when_others_run_on_all_its_cpus(
    tmp_path: Path,
) -> None:
    # Found by the state machine: a Guaranteed 1500m container restored as shared (no
    # exclusive CPU was free) runs on NUMA node #1's CPUs 4-7, and the socket's shared
    # container runs on all of them too: it owns none. A restart that picked one for it
    # moved the socket's container off that CPU.
    layout = Layout(nodes_per_die=2, cores_per_node=2, threads=2, isolated="0")
    p = policy(tmp_path, layout, reserved="750m", pin_memory=False)
    g_pod, g = guaranteed("g", 1500)
    shared_pod, shared = guaranteed("shared", 250)
    updates = p.synchronize(
        [g_pod, shared_pod], [running(g, "4-7", None), running(shared, "2-7", None)]
    )
    assert updates == []
    assert _claim(p, g.id) == (Kind.SHARED, "")


def test_a_restart_under_pin_memory_off_finds_a_mixed_containers_pool_by_its_cpus_not_its_mems(
    tmp_path: Path,
) -> None:
    # Found by the state machine. Two NUMA nodes of one 2-thread core (CPUs 0-1, 2-3). The
    # mixed container of NUMA node #1 owns CPU 2 and shares 3; it still has the socket's
    # mems 0-1 from before it moved there, which pin-memory off leaves alone. A restart
    # that took those mems for its pool's restored it in the socket and moved it onto the
    # socket's shared CPUs 1,3 (to 1-3).
    layout = Layout(nodes_per_die=2, cores_per_node=1, threads=2)
    p = policy(tmp_path, layout, reserved="750m", pin_memory=False, unlimited_burstable="package")
    mixed_pod, mixed = guaranteed("mixed", 1500)
    socket_pod, socket = burstable("socket", 1000)
    updates = p.synchronize(
        [mixed_pod, socket_pod], [running(mixed, "2-3", "0-1"), running(socket, "1,3", "0-1")]
    )
    assert updates == []
    assert _claim(p, mixed.id) == (Kind.MIXED, "2")
    assert _allocation(p, mixed.id).pool == "NUMA node #1"
