"""Topology-aware supply: what each pool holds, the load placed in it, and whether a grant fits.

Every pool's shared CPUs are its sharable CPUs minus every exclusive CPU granted anywhere, so
taking or returning exclusive CPUs changes the cpuset of shared containers in overlapping
pools. Exclusive CPUs are sliced only from shared capacity no container uses (``_fit``).
"""

from __future__ import annotations

import attrs

from nri_resmgr.config.models import TopologyAwareSpec
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.allocations import NO_CPUS, AllocationCache, Kind, PoolLoad
from nri_resmgr.policies.topology_aware.memzones import MemoryAllocator
from nri_resmgr.policies.topology_aware.pools import Pool, ancestors, subtree
from nri_resmgr.policies.topology_aware.preferences import Want
from nri_resmgr.policies.topology_aware.scoring import (
    children_first,
    find_existing_level,
)
from nri_resmgr.sysfs import System

__all__ = ["Candidate", "Supply"]

_IDLE = PoolLoad()


@attrs.frozen
class Candidate:
    pool: int
    isolated: bool
    capacity: int
    """mCPU of shared capacity left in the pool after this grant."""
    free: int
    """mCPU of shared capacity before this grant (nri-plugins AllocatableSharedCPU)."""
    source: CpuSet = attrs.field(factory=CpuSet)
    """Where exclusive CPUs may be picked from without emptying any shared pool."""


class Supply:
    """Pools, the load the cache's grants put on them, and whether a new grant fits.

    The rule every grant keeps (as nri-plugins does): exclusive CPUs are sliced only from
    shared capacity no container uses, so a pool holding (or below an ancestor holding)
    shared containers always keeps a CPU; an idle pool may be sliced empty, the root never.
    """

    def __init__(
        self,
        system: System,
        spec: TopologyAwareSpec,
        pools: list[Pool],
        allowed: CpuSet,
        reserved: CpuSet,
    ) -> None:
        self.system = system
        self.spec = spec
        self.pools = pools
        self.allowed = allowed
        self.reserved = reserved
        self.isolated = (system.isolated & allowed) - reserved
        self.sharable = [(p.cpus & allowed) - self.isolated - reserved for p in pools]
        self.isolated_of = [p.cpus & self.isolated for p in pools]
        self.index = {p.name: p.index for p in pools}
        self.subtrees = [subtree(pools, p.index) for p in pools]
        self.ancestors = [ancestors(pools, p.index) for p in pools]
        # Strict descendants, deepest first: the order their minimum shares are set aside in.
        self.descendants = [
            sorted(self.subtrees[p.index][1:], key=lambda i: -pools[i].depth) for p in pools
        ]
        self.cache = AllocationCache()
        # nri-plugins numbers pools children first (post-order); its ties go to the lower id.
        postorder = children_first(pools)
        self.upstream_id = {pool: n for n, pool in enumerate(postorder)}
        self.links_below = [
            [(d, pools[d].depth - p.depth) for d in self.subtrees[p.index]] for p in pools
        ]
        self._levels = [pools[i].level for i in postorder]
        self.unlimited_level = find_existing_level(self._levels, spec.unlimited_burstable)
        self.memory = MemoryAllocator(system)
        # The shared cpusets every cached allocation was last brought in line with; None when
        # allocations were stored from outside (restore) and must all be checked again.
        self._settled: list[CpuSet] | None = None
        # Every pool's shared CPUs for the last ``taken`` asked about (the cache's exclusive
        # CPUs, which only change on an exclusive grant or release): one decision asks for
        # them dozens of times.
        self._shared_memo: tuple[CpuSet, list[CpuSet]] | None = None

    # -- supply ---------------------------------------------------------------------------

    def shared_cpus(self, pool: int, taken: CpuSet | None = None) -> CpuSet:
        return self._shared_sets(taken)[pool]

    def _shared_sets(self, taken: CpuSet | None = None) -> list[CpuSet]:
        """Every pool's shared CPUs with ``taken`` (default: all exclusive CPUs) set aside;
        the list is shared, never to be changed."""
        if taken is None:
            taken = self.cache.exclusive_cpus()
        memo = self._shared_memo
        if memo is None or memo[0] is not taken:
            memo = self._shared_memo = (taken, [s - taken for s in self.sharable])
        return memo[1]

    def _usage(self) -> dict[int, PoolLoad]:
        """Per pool index: the load of the containers placed in it."""
        usage: dict[int, PoolLoad] = {}
        for pool, load in self.cache.loads().items():
            i = self.index.get(pool)
            if i is not None:
                usage[i] = load
        return usage

    def _subtree_load(self, pool: int, usage: dict[int, PoolLoad]) -> PoolLoad:
        mcpu = users = count = zero = 0
        for i in self.subtrees[pool]:
            load = usage.get(i, _IDLE)
            mcpu, users, count, zero = (
                mcpu + load.shared_mcpu,
                users + load.shared_users,
                count + load.containers,
                zero + load.zero_requests,
            )
        return PoolLoad(mcpu, users, count, zero)

    def _load(self, pool: int, usage: dict[int, PoolLoad], taken: CpuSet) -> PoolLoad:
        """The subtree's load, its shared mCPU as ``_shared_load`` counts it."""
        shared = self._shared_load(pool, usage, taken)
        return self._subtree_load(pool, usage)._replace(shared_mcpu=shared)

    def _shared_load(self, pool: int, usage: dict[int, PoolLoad], taken: CpuSet) -> int:
        """mCPU of the pool's shared CPUs in use: its subtree's shared requests plus this
        pool's part of its ancestors' shared containers; a subtree holding containers that
        ask no CPU counts 1 mCPU more (nri-plugins AllocatableSharedCPU), so they are never
        left without a CPU. (Every fit asks for it: no PoolLoad is built on the way.)"""
        mcpu = zero = 0
        for i in self.subtrees[pool]:
            load = usage.get(i)
            if load is not None:
                mcpu += load.shared_mcpu
                zero += load.zero_requests
        if zero:
            mcpu += 1
        ancestors = self.ancestors[pool]
        if ancestors:
            own = len(self.shared_cpus(pool, taken))
            for a in ancestors:
                part = usage.get(a, _IDLE).shared_mcpu
                wider = len(self.shared_cpus(a, taken))
                if part and wider:
                    # An ancestor's shared containers spread over all of its CPUs.
                    mcpu += part * own // wider
        return mcpu

    def _set_aside(self, pool: int, usage: dict[int, PoolLoad], taken: CpuSet) -> CpuSet:
        """CPUs of ``pool``'s descendants that must stay shared: as many as the containers
        placed in each need (nri-plugins SliceableCPUs), so an idle pool may be sliced empty."""
        kept = CpuSet()
        for d in self.descendants[pool]:
            shared = self.shared_cpus(d, taken)
            if not shared:
                continue
            load = self._subtree_load(d, usage)
            need = -(-(load.shared_mcpu + (1 if load.zero_requests else 0)) // 1000)
            missing = need - len(kept & shared)
            if missing > 0:
                kept = kept | CpuSet(list(shared - kept)[:missing])
        return kept

    def pool_load(self, pool: int) -> PoolLoad:
        """The load of a pool and its subtree, as placement sees them (an ancestor's shared
        containers counted by share); for exports."""
        return self._load(pool, self._usage(), self.cache.exclusive_cpus())

    def _fit(
        self, pool: int, want: Want, usage: dict[int, PoolLoad], taken: CpuSet
    ) -> Candidate | None:
        shared = self._shared_sets(taken)[pool]
        load = self._shared_load(pool, usage, taken)
        uses_shared = want.kind in (Kind.SHARED, Kind.MIXED)
        shared_part = want.shared_part if uses_shared else 0
        remaining = len(shared)
        isolated = False
        source = NO_CPUS
        if want.exclusive:
            free_isolated = self.isolated_of[pool] - taken
            if want.isolated and len(free_isolated) >= want.exclusive:
                isolated, source = True, free_isolated
            else:
                remaining -= want.exclusive
                source = shared - self._set_aside(pool, usage, taken)
                # nri-plugins pickExclusiveCPUs: exclusive CPUs while the pool's allocatable
                # shared capacity covers them; what its containers use stays shared. Unlike
                # nri-plugins (which then leaves containers unpinned) the root keeps a CPU.
                if (
                    len(source) < want.exclusive
                    or remaining * 1000 < load
                    or remaining < self._floor(pool)
                    or not self._ancestors_keep(pool, want.exclusive, shared_part, usage, taken)
                ):
                    return None
        if uses_shared and (remaining < 1 or remaining * 1000 < load + shared_part):
            return None
        free = remaining * 1000 - load
        if want.exclusive and not isolated:
            free += 1000 * want.exclusive
        return Candidate(pool, isolated, remaining * 1000 - load - shared_part, free, source)

    def _ancestors_keep(
        self, pool: int, count: int, extra: int, usage: dict[int, PoolLoad], taken: CpuSet
    ) -> bool:
        """Whether every ancestor still holds its subtree's load with ``count`` CPUs fewer."""
        for a in self.ancestors[pool]:
            left = len(self.shared_cpus(a, taken)) - count
            if (
                left < self._floor(a)
                or left * 1000 < self._subtree_load(a, usage).shared_mcpu + extra
            ):
                return False
        return True

    def _floor(self, pool: int) -> int:
        """Shared CPUs a pool keeps whatever its load: one for the root, so every container
        always has a CPU to be pinned to; none for the others, so idle ones may be sliced."""
        return 0 if self.ancestors[pool] else 1
