"""What the topology-aware grants mean for the runtime: each container's cpuset and memory
nodes, the adjustment of a container being created, and the updates after a shared set moved.
"""

from __future__ import annotations

import functools

from nri_resmgr.cpus.errors import PlacementError
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.allocations import BY_CONTAINER_ID, Allocation, Kind, follow
from nri_resmgr.policies.annotations import lookup_bool
from nri_resmgr.policies.requests import milli_cpu_to_shares
from nri_resmgr.policies.topology_aware.pools import Pool
from nri_resmgr.policies.topology_aware.supply import Supply
from nri_resmgr.resmgr.model import Adjustment, Update

__all__ = ["Cpusets"]


class Cpusets(Supply):
    """The cpusets the cached grants imply, kept in line with the runtime."""

    def desired(
        self, a: Allocation, taken: CpuSet | None = None, shared: list[CpuSet] | None = None
    ) -> tuple[CpuSet | None, CpuSet | None]:
        if a.kind is Kind.PRESERVE:
            return None, None
        pool = self.pools[self.index.get(a.pool, 0)]
        cpus: CpuSet | None
        if a.kind is Kind.RESERVED:
            cpus = self.reserved
        elif a.kind is Kind.EXCLUSIVE:
            cpus = a.exclusive
        elif a.kind is Kind.MIXED:
            cpus = a.exclusive | self._shared_of(pool.index, taken, shared)
        else:
            cpus = self._shared_of(pool.index, taken, shared)
        mems = None if (a.keep_mems or not self.spec.pin_memory) else self._mems_of(a, pool)
        if cpus and _hides_hyperthreads(a):
            cpus = self.system.single_threads(cpus)
        return (cpus if self.spec.pin_cpu else None), mems

    def _mems_of(self, a: Allocation, pool: Pool) -> CpuSet:
        """The container's memory zone; its pool's memory when it has none (unaccounted)."""
        return self.memory.zone_of(a.container_id) or pool.mems

    def _shared_of(self, pool: int, taken: CpuSet | None, shared: list[CpuSet] | None) -> CpuSet:
        return shared[pool] if shared is not None else self.shared_cpus(pool, taken)

    def adjustment(self, a: Allocation, held: Allocation | None = None) -> Adjustment:
        """The adjustment of a container being created (or updated, ``held`` being what it
        had): what it sets is what the runtime will hold, what it leaves alone stays."""
        cpus, mems = self.desired(a)
        if cpus is not None and not cpus:
            raise PlacementError(f"{a.name}: no CPU left in pool {a.pool} ({a.kind.value})")
        self.cache.put(
            a.with_cpusets(
                cpus if cpus is not None or held is None else held.cpus,
                mems if mems is not None or held is None else held.mems,
            )
        )
        shares = None if a.kind is Kind.PRESERVE else milli_cpu_to_shares(_portion(a))
        return _adjustment(cpus, mems, shares)

    def unsettle(self) -> None:
        """Allocations were stored with cpusets the engine did not choose (restore): the next
        ``refresh`` checks every container, not only after a change of the shared sets."""
        self._settled = None
        self.memory.sync(self.cache, {p.name: p.mems for p in self.pools})

    def refresh(self, skip: str | None = None) -> list[Update]:
        """Updates for every container whose cpuset or mems no longer match its grant.

        A container's wanted cpuset depends only on its own grant (kept in line when granted)
        and its pool's shared CPUs, so while no shared set changed there is nothing to do:
        placing a shared container stays O(pools), not O(containers).
        """
        taken = self.cache.exclusive_cpus()
        shared = self._shared_sets(taken)
        settled, self._settled = self._settled, shared
        if shared == settled:
            return []
        updates: list[Update] = []
        for a in sorted(self._unsettled(shared, settled), key=BY_CONTAINER_ID):
            if a.container_id == skip:
                continue
            cpus, mems = self.desired(a, taken, shared)
            if cpus is a.cpus and mems is a.mems:
                continue  # the common case, settled: no call at all (follow compares values)
            followed = follow(a, cpus, mems)
            if followed is not None:
                self.cache.put(followed.applied)
                updates.append(followed.update)
        return updates

    def _unsettled(self, shared: list[CpuSet], settled: list[CpuSet] | None) -> list[Allocation]:
        """The allocations that may need an update: all of them when nothing is settled, else
        those of the pools whose shared CPUs changed (the others' wanted cpusets did not)."""
        if settled is None:
            return list(self.cache)
        changed = {
            i for i, (new, old) in enumerate(zip(shared, settled, strict=True)) if new != old
        }
        out: list[Allocation] = []
        for name in self.cache.pool_names():
            # desired() places an allocation of an unknown pool in the root.
            if self.index.get(name, 0) in changed:
                out.extend(self.cache.in_pool(name))
        return out


def _hides_hyperthreads(a: Allocation) -> bool:
    """hide-hyperthreads: one thread per core of the grant (nri-plugins pools.go
    setPreferredCpusetCpus)."""
    if a.pod is None or a.container is None or not a.pod.annotations:
        return False  # the common case, on every refresh of every container: no lookups
    return lookup_bool(a.pod, a.container, "hide-hyperthreads") is True


def _portion(a: Allocation) -> int:
    if a.kind is Kind.EXCLUSIVE:
        return 1000 * len(a.exclusive)
    if a.kind is Kind.MIXED:
        return a.request % 1000
    return a.request


@functools.lru_cache(maxsize=1024)
def _adjustment(cpus: CpuSet | None, mems: CpuSet | None, shares: int | None) -> Adjustment:
    """One Adjustment per distinct answer: a pool's containers all get the same one, and the
    reply encoder keeps each one's bytes (hashed once, ``Adjustment`` caches its hash)."""
    return Adjustment(
        cpuset_cpus=None if cpus is None else str(cpus),
        cpuset_mems=None if mems is None else str(mems),
        cpu_shares=shares,
    )
