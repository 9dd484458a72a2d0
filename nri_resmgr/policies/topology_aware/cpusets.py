"""What the topology-aware grants mean for the runtime: each container's cpuset and memory
nodes, and the adjustment of a container being created.

``Cpusets`` is a part of ``Engine``: it reads the supply (the pools' shared CPUs) and the
memory zones and stores nothing; the engine records what was answered and keeps the runtime
in line (``Engine.adjustment``, ``Engine.refresh``).
"""

from __future__ import annotations

import functools

from nri_resmgr.cpus.errors import PlacementError
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.allocations import Allocation, Kind
from nri_resmgr.policies.annotations import lookup_bool
from nri_resmgr.policies.requests import milli_cpu_to_shares
from nri_resmgr.policies.topology_aware.memzones import MemoryAllocator
from nri_resmgr.policies.topology_aware.pools import Pool
from nri_resmgr.policies.topology_aware.supply import Supply
from nri_resmgr.resmgr.model import Adjustment

__all__ = ["Cpusets"]


class Cpusets:
    """The cpuset and memory nodes each grant implies, and the adjustment that sets them."""

    def __init__(self, supply: Supply, memory: MemoryAllocator) -> None:
        self._supply = supply
        self._memory = memory
        # The supply's facts ``desired`` reads for every create and refresh, one step away.
        self._pools = supply.pools
        self._index = supply.index
        self._reserved = supply.reserved
        self._spec = supply.spec
        self._system = supply.system

    def desired(
        self, a: Allocation, taken: CpuSet | None = None, shared: list[CpuSet] | None = None
    ) -> tuple[CpuSet | None, CpuSet | None]:
        """The (cpus, mems) ``a``'s container should have; None where the policy leaves it
        alone. ``taken`` and ``shared``: the exclusive CPUs and shared sets, if known."""
        if a.kind is Kind.PRESERVE:
            return None, None
        pool = self._pools[self._index.get(a.pool, 0)]
        cpus: CpuSet | None
        if a.kind is Kind.RESERVED:
            cpus = self._reserved
        elif a.kind is Kind.EXCLUSIVE:
            cpus = a.exclusive
        elif a.kind is Kind.MIXED:
            cpus = a.exclusive | self._shared_of(pool.index, taken, shared)
        else:
            cpus = self._shared_of(pool.index, taken, shared)
        spec = self._spec
        mems = None if (a.keep_mems or not spec.pin_memory) else self.mems_of(a, pool)
        if cpus and _hides_hyperthreads(a):
            cpus = self._system.single_threads(cpus)
        return (cpus if spec.pin_cpu else None), mems

    def mems_of(self, a: Allocation, pool: Pool) -> CpuSet:
        """The container's memory zone; its pool's memory when it has none (unaccounted)."""
        return self._memory.zone_of(a.container_id) or pool.mems

    def _shared_of(self, pool: int, taken: CpuSet | None, shared: list[CpuSet] | None) -> CpuSet:
        return shared[pool] if shared is not None else self._supply.shared_cpus(pool, taken)

    def adjustment(self, a: Allocation, cpus: CpuSet | None, mems: CpuSet | None) -> Adjustment:
        """The adjustment giving ``a``'s container ``cpus`` and ``mems`` (``desired``'s
        answer) and its CPU shares; PlacementError when ``cpus`` is empty."""
        if cpus is not None and not cpus:
            raise PlacementError(f"{a.name}: no CPU left in pool {a.pool} ({a.kind.value})")
        shares = None if a.kind is Kind.PRESERVE else milli_cpu_to_shares(_portion(a))
        return _adjustment(cpus, mems, shares)


def _hides_hyperthreads(a: Allocation) -> bool:
    """hide-hyperthreads: one thread per core of the grant (nri-plugins pools.go
    setPreferredCpusetCpus)."""
    if a.pod is None or a.container is None or not a.pod.annotations:
        return False  # the common case, on every refresh of every container: no lookups
    return lookup_bool(a.pod, a.container, "hide-hyperthreads") is True


def _portion(a: Allocation) -> int:
    """mCPU the container's CPU shares weigh: its exclusive CPUs; what it takes from its
    pool's shared CPUs (a mixed one only its fraction, as nri-plugins); a reserved request."""
    if a.kind is Kind.EXCLUSIVE:
        return 1000 * len(a.exclusive)
    return a.shared_part if a.kind.uses_shared else a.request


@functools.lru_cache(maxsize=1024)
def _adjustment(cpus: CpuSet | None, mems: CpuSet | None, shares: int | None) -> Adjustment:
    """One Adjustment per distinct answer: a pool's containers all get the same one, and the
    reply encoder keeps each one's bytes (hashed once, ``Adjustment`` caches its hash)."""
    return Adjustment(
        cpuset_cpus=None if cpus is None else str(cpus),
        cpuset_mems=None if mems is None else str(mems),
        cpu_shares=shares,
    )
