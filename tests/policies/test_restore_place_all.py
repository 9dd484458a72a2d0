"""``batch.place_all`` (restore's re-allocations) decides as ``Engine.grant`` one by one.

Synchronize hands over containers that report no cpuset (a runtime that never had a
resource manager): each is re-allocated. The lean path for plain shared containers must
give exactly what the sequential grants give, on machines with many pools and few, with
pools filling up (the over-commit fallback) and containers of every kind mixed in.
"""

from __future__ import annotations

import random
from pathlib import Path

import attrs
import pytest

from nri_resmgr.policies.topology_aware import TopologyAwarePolicy, batch
from nri_resmgr.policies.topology_aware.preferences import Want
from nri_resmgr.resmgr.model import Container, Pod, Resources, Update
from nri_resmgr.resmgr.policy import PolicyEnv
from nri_resmgr.sysfs.system import System
from tests.policies.workload import (
    besteffort,
    burstable,
    container,
    guaranteed,
    pod,
    topology_spec,
)
from tests.sysfs.fakesys import Layout, write_sysfs

MACHINES = {
    "1 pool": Layout(packages=1, nodes_per_die=1, cores_per_node=2, threads=1),
    "2x2 nodes": Layout(packages=2, nodes_per_die=2, cores_per_node=4, threads=2),
}


def _workload(rng: random.Random, n: int) -> list[tuple[Pod, Container]]:
    """Mostly shared (BestEffort, Burstable with and without limits, sub-CPU), some
    exclusive and mixed, a few kube-system (reserved), some pods of several containers."""
    out: list[tuple[Pod, Container]] = []
    for i in range(n):
        r = rng.random()
        if r < 0.35:
            pc = besteffort(f"e{i}")
        elif r < 0.6:
            pc = burstable(f"b{i}", rng.choice([0, 10, 100, 250]), rng.choice([None, 500, 2000]))
        elif r < 0.7:
            pc = guaranteed(f"g{i}", rng.choice([1000, 2000]))
        elif r < 0.75:
            pc = guaranteed(f"m{i}", 1500)
        elif r < 0.8:
            pc = burstable(f"k{i}", 100, namespace="kube-system")
        elif r < 0.9:
            pc = burstable(f"big{i}", rng.choice([1500, 3000]))
        else:
            p = pod(f"p{i}", "besteffort")
            out.extend((p, container(p, f"c{k}")) for k in range(rng.randint(2, 5)))
            continue
        out.append(pc)
    return out


def _memory_limited(rng: random.Random, pcs: list[tuple[Pod, Container]]) -> list[Container]:
    """Containers as a runtime without a resource manager reports them: no cpusets; some
    with a memory limit (memory zones are accounted per container)."""
    out = []
    for _, c in pcs:
        res = c.resources or Resources()
        if rng.random() < 0.3:
            res = attrs.evolve(res, memory_limit=rng.choice([4 << 20, 256 << 20]))
        out.append(attrs.evolve(c, resources=res))
    return out


def _synchronize(
    root: Path, pods: list[Pod], ctrs: list[Container], sequential: bool
) -> tuple[list[tuple[object, ...]], list[Update], dict[str, object]]:
    policy = TopologyAwarePolicy()
    policy.setup(topology_spec(reserved="750m"), PolicyEnv(host_root=str(root)))
    with pytest.MonkeyPatch.context() as mp:
        if sequential:
            mp.setattr(batch, "_place_plain", lambda engine, live: False)
        updates = policy.synchronize(pods, ctrs)
    engine = policy.engine
    grants = sorted(
        (a.container_id, a.pool, a.kind, a.request, a.exclusive, a.isolated, a.cpus, a.mems)
        for a in engine.allocations()
    )
    zones = {a.container_id: engine.memory.zone_of(a.container_id) for a in engine.allocations()}
    return grants, updates, zones


@pytest.mark.parametrize("machine", sorted(MACHINES))
@pytest.mark.parametrize("seed", range(6))
def test_place_all_equals_sequential_grants(tmp_path: Path, machine: str, seed: int) -> None:
    root = write_sysfs(tmp_path, MACHINES[machine])
    rng = random.Random(seed)
    pcs = _workload(rng, rng.choice([20, 60, 150]))
    pods = list({p.id: p for p, _ in pcs}.values())
    ctrs = _memory_limited(rng, pcs)

    batched = _synchronize(root, pods, ctrs, sequential=False)
    sequential = _synchronize(root, pods, ctrs, sequential=True)

    assert batched[0] == sequential[0]
    assert batched[1] == sequential[1]
    assert batched[2] == sequential[2]


def test_the_lean_path_is_taken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison above would pass trivially if every container fell back to grant."""
    root = write_sysfs(tmp_path, MACHINES["2x2 nodes"])
    pcs = [besteffort(f"e{i}") for i in range(10)] + [guaranteed("g", 2000)]
    grants: list[Want] = []
    policy = TopologyAwarePolicy()
    policy.setup(topology_spec(), PolicyEnv(host_root=str(root)))
    real = policy.engine.grant

    def counting(*args: object, **kw: object) -> object:
        grants.append(args[3])  # type: ignore[arg-type]
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(policy.engine, "grant", counting)
    policy.synchronize(list({p.id: p for p, _ in pcs}.values()), [c for _, c in pcs])
    assert [w.exclusive for w in grants] == [2]  # only the exclusive one took Engine.grant
    assert len(policy.engine.allocations()) == 11
    assert isinstance(policy.engine.system, System)
