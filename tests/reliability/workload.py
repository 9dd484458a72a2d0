"""A topology-aware daemon core on a synthetic machine, fed through the runtime simulator,
and the consistency check every reliability test ends with.

"Consistent" means: the policy's allocation cache, the manager's container cache and the
runtime's containers name exactly the same containers; no exclusive CPU is held twice; and
the cpuset each container has in the runtime is the one the policy thinks it gave it.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from nri_resmgr._gen.nri.pkg.api import v1alpha1 as api
from nri_resmgr.backoff import Backoff
from nri_resmgr.config.models import Constraints, TopologyAwareSpec
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.nri import convert
from nri_resmgr.nri.service import NriService
from nri_resmgr.policies.allocations import Allocation
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from nri_resmgr.resmgr.manager import ResourceManager
from nri_resmgr.resmgr.policy import PolicyEnv
from nri_resmgr.sim.runtime import Simulator
from tests.policies.workload import besteffort, burstable, guaranteed

_names = itertools.count()


def topology_manager(host_root: Path) -> ResourceManager:
    spec = TopologyAwareSpec(reserved_resources=Constraints.of(cpu="cpuset:0"))
    return ResourceManager(TopologyAwarePolicy(), spec, PolicyEnv(host_root=str(host_root)))


def fast_backoff() -> Backoff:
    return Backoff(initial=0.01, maximum=0.05)


@asynccontextmanager
async def nri_service(manager: ResourceManager, socket: str) -> AsyncIterator[NriService]:
    service = NriService(manager, socket, "resmgr", "90", env={}, backoff=fast_backoff())
    async with trio.open_nursery() as nursery:
        await nursery.start(service.serve)
        yield service
        await service.stop()


def mixed_pod(n: int) -> tuple[api.PodSandbox, api.Container]:
    """Pod n of a repeating mix: 1-CPU and 2-CPU Guaranteed, Burstable, BestEffort."""
    name = f"w{n}-{next(_names)}"
    kind = n % 4
    if kind == 0:
        pod, ctr = guaranteed(name, 1000)
    elif kind == 1:
        pod, ctr = guaranteed(name, 2000)
    elif kind == 2:
        pod, ctr = burstable(name, 200, 1000)
    else:
        pod, ctr = besteffort(name)
    return convert.pod_to_proto(pod), convert.container_to_proto(ctr)


def allocations(manager: ResourceManager) -> dict[str, Allocation]:
    policy = manager.policy
    assert isinstance(policy, TopologyAwarePolicy)
    return {a.container_id: a for a in policy.engine.allocations()}


def runtime_cpus(sim: Simulator) -> dict[str, CpuSet | None]:
    out: dict[str, CpuSet | None] = {}
    for cid, ctr in sim.containers.items():
        text = ctr.linux.resources.cpu.cpus
        out[cid] = CpuSet.parse(text) if text else None
    return out


def inconsistencies(manager: ResourceManager, sim: Simulator) -> list[str]:
    """Every way the policy's view and the runtime's disagree; empty when the node is consistent."""
    problems: list[str] = []
    allocs = allocations(manager)
    live = set(sim.containers)
    if set(allocs) != live:
        problems.append(
            f"policy cache vs runtime: missing {sorted(live - set(allocs))}, "
            f"extra {sorted(set(allocs) - live)}"
        )
    owner: dict[int, str] = {}
    for a in allocs.values():
        for cpu in a.exclusive:
            if cpu in owner:
                problems.append(f"CPU {cpu} exclusive to both {owner[cpu]} and {a.container_id}")
            owner[cpu] = a.container_id
    have = runtime_cpus(sim)
    for cid, a in allocs.items():
        if cid in have and a.cpus is not None and have[cid] != a.cpus:
            problems.append(f"{cid}: runtime has cpus {have[cid]}, policy gave {a.cpus}")
    return problems
