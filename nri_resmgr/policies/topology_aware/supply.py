"""Topology-aware supply: what each pool holds, the load placed in it, whether a grant fits,
and which of the pools that fit is best (``choose``).

Every pool's shared CPUs are its sharable CPUs minus every exclusive CPU granted anywhere, so
taking or returning exclusive CPUs changes the cpuset of shared containers in overlapping
pools. Exclusive CPUs are sliced only from shared capacity no container uses (``fit``).

``Supply`` is a part of ``Engine``: it reads the engine's grants (``AllocationView``, the
store's read side) and memory zones, and writes neither.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping

import attrs

from nri_resmgr.config.models import TopologyAwareSpec
from nri_resmgr.cpus import Priority
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.allocations import NO_CPUS, AllocationView, PoolLoad, shared_need
from nri_resmgr.policies.topology_aware.affinity import pool_score as affinity_score
from nri_resmgr.policies.topology_aware.cpuprefs import priority_capacity
from nri_resmgr.policies.topology_aware.hints import (
    ContainerHints,
    HintTarget,
    combine,
    hint_targets,
    pool_score,
)
from nri_resmgr.policies.topology_aware.memory import MemoryWant
from nri_resmgr.policies.topology_aware.memzones import MemoryAllocator
from nri_resmgr.policies.topology_aware.pools import Pool, ancestors, subtree
from nri_resmgr.policies.topology_aware.preferences import Want
from nri_resmgr.policies.topology_aware.scoring import (
    LEVEL_VALUES,
    Ask,
    PoolScore,
    best,
    children_first,
    find_existing_level,
    memory_key,
)
from nri_resmgr.sysfs import System

__all__ = ["Candidate", "Supply"]

log = logging.getLogger(__name__)

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
    """Pools, the load the engine's grants put on them, whether a new grant fits and where.

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
        grants: AllocationView,
        memory: MemoryAllocator,
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
        # nri-plugins numbers pools children first (post-order); its ties go to the lower id.
        postorder = children_first(pools)
        self.upstream_id = {pool: n for n, pool in enumerate(postorder)}
        self.links_below = [
            [(d, pools[d].depth - p.depth) for d in self.subtrees[p.index]] for p in pools
        ]
        self._levels = [pools[i].level for i in postorder]
        self.unlimited_level = find_existing_level(self._levels, spec.unlimited_burstable)
        self._grants = grants
        self._memory = memory
        # Every pool's shared CPUs for the last ``taken`` asked about (the grants' exclusive
        # CPUs, which only change on an exclusive grant or release): one decision asks for
        # them dozens of times.
        self._shared_memo: tuple[CpuSet, list[CpuSet]] | None = None

    # -- supply ---------------------------------------------------------------------------

    def shared_cpus(self, pool: int, taken: CpuSet | None = None) -> CpuSet:
        """The pool's shared CPUs with ``taken`` (default: all exclusive CPUs) set aside."""
        return self.shared_sets(taken)[pool]

    def shared_sets(self, taken: CpuSet | None = None) -> list[CpuSet]:
        """Every pool's shared CPUs with ``taken`` (default: all exclusive CPUs) set aside;
        the list is shared, never to be changed."""
        if taken is None:
            taken = self._grants.exclusive_cpus()
        memo = self._shared_memo
        if memo is None or memo[0] is not taken:
            memo = self._shared_memo = (taken, [s - taken for s in self.sharable])
        return memo[1]

    def usage(self) -> dict[int, PoolLoad]:
        """Per pool index: the load of the containers placed in it."""
        usage: dict[int, PoolLoad] = {}
        for pool, load in self._grants.loads().items():
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
        ask no CPU counts 1 mCPU more (``shared_need``). (Every fit asks for it: no PoolLoad
        is built on the way.)"""
        mcpu = zero = 0
        for i in self.subtrees[pool]:
            load = usage.get(i)
            if load is not None:
                mcpu += load.shared_mcpu
                zero += load.zero_requests
        mcpu = shared_need(mcpu, zero)
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
            need = -(-self._subtree_load(d, usage).shared_need // 1000)
            missing = need - len(kept & shared)
            if missing > 0:
                kept = kept | CpuSet(list(shared - kept)[:missing])
        return kept

    def holds_its_load(self, pool: int, taken: CpuSet) -> bool:
        """Whether the pool's shared CPUs, with ``taken`` held exclusively, still hold the
        shared load placed in it and below it (and its part of its ancestors'), as ``fit``
        counts it: where a DRA claim moves the shared containers of a pool it empties."""
        shared = self.shared_cpus(pool, taken)
        return bool(shared) and 1000 * len(shared) >= self._shared_load(pool, self.usage(), taken)

    def pool_load(self, pool: int) -> PoolLoad:
        """The load of a pool and its subtree, as placement sees them (an ancestor's shared
        containers counted by share); for exports."""
        return self._load(pool, self.usage(), self._grants.exclusive_cpus())

    def fit(
        self, pool: int, want: Want, usage: dict[int, PoolLoad], taken: CpuSet
    ) -> Candidate | None:
        """How ``want`` fits in ``pool`` with ``usage`` placed and ``taken`` held
        exclusively; None when it does not."""
        shared = self.shared_sets(taken)[pool]
        load = self._shared_load(pool, usage, taken)
        uses_shared = want.kind.uses_shared
        shared_part = want.kind.shared_part(want.request)
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

    def most_cpus(self, pool: int, want_of: Callable[[int], Want], most: int) -> int:
        """The largest n <= ``most`` whose ``want_of(n)`` fits in ``pool`` now (0 if none):
        what a new container could still get there (the NodeResourceTopology NUMA zones'
        ``available``). A binary search: ``want_of`` must ask more as n grows, so that a grant
        that fits still fits with a CPU fewer (``fit``'s conditions all loosen)."""
        taken = self._grants.exclusive_cpus()
        usage = self.usage()
        low, high = 0, most
        while low < high:
            mid = (low + high + 1) // 2
            if self.fit(pool, want_of(mid), usage, taken) is None:
                high = mid - 1
            else:
                low = mid
        return low

    def _ancestors_keep(
        self, pool: int, count: int, extra: int, usage: dict[int, PoolLoad], taken: CpuSet
    ) -> bool:
        """Whether every ancestor still holds its subtree's load with ``count`` CPUs fewer
        (``shared_need``: a BestEffort container in an ancestor keeps a CPU there)."""
        for a in self.ancestors[pool]:
            left = len(self.shared_cpus(a, taken)) - count
            need = self._subtree_load(a, usage).shared_need + extra
            if left < self._floor(a) or left * 1000 < need:
                return False
        return True

    def _floor(self, pool: int) -> int:
        """Shared CPUs a pool keeps whatever its load: one for the root, so every container
        always has a CPU to be pinned to; none for the others, so idle ones may be sliced."""
        return 0 if self.ancestors[pool] else 1

    # -- choosing a pool ------------------------------------------------------------------

    def choose(
        self,
        want: Want,
        hint: str | None = None,
        affinity: Mapping[str, int] | None = None,
        memory: MemoryWant | None = None,
        topo: ContainerHints | None = None,
    ) -> Candidate | None:
        """The best fitting pool for ``want`` (the hinted one if it fits), in nri-plugins'
        order (``scoring.compare``); ``affinity`` weighs pools by name, ``topo`` by the
        container's topology hints; None if none fits."""
        taken = self._grants.exclusive_cpus()
        usage = self.usage()
        if len(self.pools) == 1:
            return self.fit(0, want, usage, taken)  # one pool, hinted or not: no choice
        return self._best_fit(want, hint, affinity, memory, topo, usage, taken)

    def _best_fit(
        self,
        want: Want,
        hint: str | None,
        affinity: Mapping[str, int] | None,
        memory: MemoryWant | None,
        topo: ContainerHints | None,
        usage: dict[int, PoolLoad],
        taken: CpuSet,
    ) -> Candidate | None:
        """``choose`` among the pools that fit, with the usage and exclusive CPUs now."""
        if hint is not None and hint in self.index:
            fit = self.fit(self.index[hint], want, usage, taken)
            if fit is not None:
                return fit
        fits = []
        for p in self.pools:  # a loop, not a generator in a comprehension: two frames fewer
            fit = self.fit(p.index, want, usage, taken)
            if fit is not None:
                fits.append(fit)
        if not fits:
            return None
        if len(fits) == 1:
            return fits[0]
        ask = self._ask(want)
        weights = {self.index[n]: w for n, w in (affinity or {}).items() if n in self.index}
        scores = [self._score(c, want, usage, taken, weights, memory, topo) for c in fits]
        return fits[[s.pool for s in scores].index(best(ask, scores).pool)]

    def _ask(self, want: Want) -> Ask:
        level = self.unlimited_level
        if want.burst_level is not None:
            if want.burst_level in LEVEL_VALUES:
                level = find_existing_level(self._levels, want.burst_level)
            else:
                log.error(
                    "ignoring invalid unlimited-burstable annotation %r (not one of %s)",
                    want.burst_level,
                    ", ".join(LEVEL_VALUES),
                )
        return Ask(
            full=want.exclusive,
            isolate=want.isolated,
            burstable=want.unlimited or want.limit is not None,
            limit=want.limit,
            level=level,
            prio=want.prio,
        )

    def _score(
        self,
        c: Candidate,
        want: Want,
        usage: dict[int, PoolLoad],
        taken: CpuSet,
        weights: Mapping[int, int],
        memory: MemoryWant | None = None,
        topo: ContainerHints | None = None,
    ) -> PoolScore:
        pool = self.pools[c.pool]
        isolated = 0
        if want.isolated:
            isolated = len(self.isolated_of[c.pool] - taken) - want.exclusive
        return PoolScore(
            pool=c.pool,
            upstream_id=self.upstream_id[c.pool],
            depth=pool.depth,
            level=pool.level,
            isolated=isolated,
            shared=c.capacity,
            free=c.free,
            colocated=usage.get(c.pool, _IDLE).containers,
            affinity=(
                affinity_score(weights, self.ancestors[c.pool], self.links_below[c.pool])
                if weights
                else 0.0
            ),
            memory=memory_key(self._memory, pool.mems, memory),
            prio=self._prio_capacity(c.pool, want, taken),
            hints=(
                None
                if topo is None
                else combine(pool_score(self._hint_targets, c.pool, h) for h in topo.hints)
            ),
        )

    def _prio_capacity(self, pool: int, want: Want, taken: CpuSet) -> int:
        if want.prio is Priority.NONE:
            return 0
        part = want.kind.shared_part(want.request)
        shared = self.shared_cpus(pool, taken)
        return priority_capacity(self.system, shared, want.prio, want.exclusive, part)

    @functools.cached_property
    def _hint_targets(self) -> list[HintTarget]:
        return hint_targets(self.system, self.pools)
