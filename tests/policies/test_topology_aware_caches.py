"""The topology-aware decision caches cannot go stale.

Decisions read memoised values: every pool's shared CPUs (recomputed when the exclusive CPUs
change), the pools a refresh re-checks (only those whose shared CPUs changed), the memory
zones' node sets and the CPU allocator's per-System core and package orders. Each test here
compares what the policy holds after grants and releases with the same thing computed from
scratch: by hand from the cache, or by a fresh policy restarted from the runtime's state.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from nri_resmgr.cpus import Priority, allocate_cpus
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from nri_resmgr.resmgr.model import Container, Pod
from nri_resmgr.resmgr.policy import PolicyEnv
from nri_resmgr.sysfs import discover
from tests.cpuallocator.machines import MACHINES
from tests.policies.workload import (
    Runtime,
    besteffort,
    burstable,
    guaranteed,
    topology_spec,
)
from tests.sysfs.fakesys import Layout, write_sysfs

MACHINE = Layout(packages=2, nodes_per_die=2, cores_per_node=4, threads=2)
"""32 CPUs, 7 pools: enough for exclusive grants to move several pools' shared sets."""


def _workload(rng: random.Random, i: int, mixed: bool = True) -> tuple[Pod, Container]:
    kind = rng.randrange(8)
    if kind == 0 or (kind == 1 and not mixed):
        return guaranteed(f"g{i}", rng.choice([1000, 2000, 3000]))
    if kind == 1:
        return guaranteed(f"m{i}", 1500)  # exclusive + shared
    if kind in (2, 3):
        return burstable(f"b{i}", rng.choice([100, 500, 1200]), 2000)
    if kind == 4:
        return burstable(f"u{i}", 200)  # unlimited: placed in a socket
    if kind == 5:
        return burstable(f"w{i}", rng.choice([9000, 17000]), 20000)  # a socket or the root
    return besteffort(f"e{i}")


def _policy(root: Path) -> TopologyAwarePolicy:
    p = TopologyAwarePolicy()
    p.setup(topology_spec(reserved="1"), PolicyEnv(host_root=str(root)))
    return p


def _assert_runtime_holds_fresh_targets(p: TopologyAwarePolicy, rt: Runtime) -> None:
    """Every container holds what its grant means with the shared sets computed anew."""
    engine = p.engine
    taken = CpuSet.union_all(a.exclusive for a in engine.allocations())
    shared = [s - taken for s in engine.supply.sharable]
    assert [engine.supply.shared_cpus(i) for i in range(len(shared))] == shared
    for a in engine.allocations():
        if a.container_id not in rt.containers:
            continue  # a claim entry, not a container
        cpus, mems = engine.cpusets.desired(a, taken, shared)
        held = rt.placement(rt.containers[a.container_id])
        assert (str(cpus), str(mems)) == held, a.name


@pytest.mark.parametrize("seed", range(4))
def test_after_every_grant_and_release_containers_hold_fresh_targets(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    root = write_sysfs(tmp_path, MACHINE)
    p = _policy(root)
    rt = Runtime(p)
    live: list[Container] = []
    exclusive_grants = 0
    depths: set[int] = set()
    for i in range(60):
        if live and rng.random() < 0.4:
            rt.remove(live.pop(rng.randrange(len(live))))
        else:
            live.append(rt.create(_workload(rng, i)))
            a = p.engine.allocation(live[-1].id)
            assert a is not None
            exclusive_grants += bool(a.exclusive)
            depths.add(p.engine.pools[p.engine.supply.index[a.pool]].depth)
        _assert_runtime_holds_fresh_targets(p, rt)
    assert exclusive_grants >= 3, "the sequence must move the shared sets several times"
    assert depths == {0, 1, 2}, "containers in the root, a socket and a NUMA node"


@pytest.mark.parametrize("seed", range(4))
def test_a_decision_after_releases_equals_a_fresh_policys(tmp_path: Path, seed: int) -> None:
    """After grants and releases, the next decisions are those of a policy restarted from
    the runtime's state, which has no history and so no cached value to be stale.

    Without exclusive+shared containers: which of a mixed container's CPUs is its exclusive
    one cannot be told from its cpuset (it holds the shared ones too), so a restart may
    pick another one, and the two policies' later decisions differ for that reason alone."""
    rng = random.Random(seed)
    root = write_sysfs(tmp_path, MACHINE)
    rt = Runtime(_policy(root))
    live = [rt.create(_workload(rng, i, mixed=False)) for i in range(16)]
    for c in rng.sample(live, 8):
        rt.remove(c)
    pods, containers = rt.reported()
    fresh = Runtime(_policy(root))
    fresh.pods = dict(rt.pods)
    fresh.containers = {c.id: c for c in containers}
    fresh.cpus, fresh.mems = dict(rt.cpus), dict(rt.mems)
    assert fresh.policy.synchronize(pods, containers) == []
    for i in range(100, 108):
        workload = _workload(rng, i, mixed=False)
        old_reply = rt.policy.create_container(*workload)
        new_reply = fresh.policy.create_container(*workload)
        assert old_reply == new_reply, workload[1].name
        for r in (rt, fresh):
            r.pods[workload[0].id] = workload[0]
            r.containers[workload[1].id] = workload[1]
            r.cpus[workload[1].id] = old_reply[0].cpuset_cpus or None
            r.mems[workload[1].id] = old_reply[0].cpuset_mems or None
            r.apply(old_reply[1])


def test_allocator_orders_per_priority_do_not_leak(tmp_path: Path) -> None:
    """Picks alternating priorities on one System equal each priority's picks on a System
    of its own (a per-System order is memoised per priority)."""
    machine = next(m for m in MACHINES if m.name == "n4c16-epp")
    shared = discover(str(machine.write(tmp_path / "shared")))
    rng = random.Random(3)
    online = sorted(shared.online)
    cases = [(CpuSet(c for c in online if rng.random() > 0.3), rng.choice([1, 2, 3, 5]))]
    cases += [(CpuSet(online), n) for n in (2, 5, 8)]
    for _ in range(20):
        cases.append((CpuSet(c for c in online if rng.random() > 0.3), rng.choice([1, 2, 3, 5])))
    prios = (Priority.NORMAL, Priority.NONE, Priority.HIGH, Priority.LOW)
    alternating = [[allocate_cpus(shared, f, n, prio) for prio in prios] for f, n in cases]
    assert len({tuple(r) for r in zip(*alternating, strict=True)}) > 1, "priorities must matter"
    for j, prio in enumerate(prios):
        own = discover(str(machine.write(tmp_path / f"own{j}")))
        assert [allocate_cpus(own, f, n, prio) for f, n in cases] == [r[j] for r in alternating]
