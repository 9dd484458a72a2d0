"""Topology-aware bookkeeping: pool supply, pool selection, grants and the cpusets they imply.

Every pool's shared CPUs are its sharable CPUs minus every exclusive CPU granted anywhere, so
taking or returning exclusive CPUs changes the cpuset of shared containers in overlapping
pools; ``refresh`` turns those changes into updates.
"""

from __future__ import annotations

import logging

import attrs

from nri_resmgr.config.models import TopologyAwareSpec
from nri_resmgr.resmgr.cache import Allocation, AllocationCache, Kind
from nri_resmgr.resmgr.cpualloc import pick_cpus
from nri_resmgr.resmgr.cpuset import CpuSet
from nri_resmgr.resmgr.model import Adjustment, Update
from nri_resmgr.resmgr.policies.topology_aware.pools import LEVELS, Pool, ancestors, subtree
from nri_resmgr.resmgr.policies.topology_aware.preferences import Want
from nri_resmgr.resmgr.requests import milli_cpu_to_shares
from nri_resmgr.sysfs import System

log = logging.getLogger(__name__)


@attrs.frozen
class Candidate:
    pool: int
    isolated: bool
    capacity: int
    """mCPU of shared capacity left in the pool after this grant."""


class Engine:
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
        self.cache = AllocationCache()
        # The shared cpusets every cached allocation was last brought in line with; None when
        # allocations were stored from outside (restore) and must all be checked again.
        self._settled: list[CpuSet] | None = None

    # -- supply ---------------------------------------------------------------------------

    def shared_cpus(self, pool: int, taken: CpuSet | None = None) -> CpuSet:
        if taken is None:
            taken = self.cache.exclusive_cpus()
        return self.sharable[pool] - taken

    def _usage(self) -> dict[int, tuple[int, int, int]]:
        """Per pool: (shared mCPU, shared users, all containers)."""
        usage: dict[int, tuple[int, int, int]] = {}
        for pool, load in self.cache.loads().items():
            i = self.index.get(pool)
            if i is not None:
                usage[i] = (load.shared_mcpu, load.shared_users, load.containers)
        return usage

    def _load(
        self, pool: int, usage: dict[int, tuple[int, int, int]], taken: CpuSet
    ) -> tuple[int, int, int]:
        load = users = count = 0
        for i in self.subtrees[pool]:
            part, u, c = usage.get(i, (0, 0, 0))
            load, users, count = load + part, users + u, count + c
        own = len(self.shared_cpus(pool, taken))
        for a in self.ancestors[pool]:
            part = usage.get(a, (0, 0, 0))[0]
            wider = len(self.shared_cpus(a, taken))
            if part and wider:
                # An ancestor's shared containers spread over all of its CPUs.
                load += part * own // wider
        return load, users, count

    def pool_load(self, pool: int) -> tuple[int, int, int]:
        """(shared mCPU, shared users, containers) of a pool and its subtree, as placement
        sees them (an ancestor's shared containers counted by share); for exports."""
        return self._load(pool, self._usage(), self.cache.exclusive_cpus())

    # -- selection ------------------------------------------------------------------------

    def _fit(
        self, pool: int, want: Want, usage: dict[int, tuple[int, int, int]], taken: CpuSet
    ) -> Candidate | None:
        shared = self.shared_cpus(pool, taken)
        load, users, _ = self._load(pool, usage, taken)
        uses_shared = want.kind in (Kind.SHARED, Kind.MIXED)
        shared_part = want.request % 1000 if want.kind is Kind.MIXED else want.request
        shared_part = shared_part if uses_shared else 0
        remaining = len(shared)
        isolated = False
        if want.exclusive:
            free_isolated = self.isolated_of[pool] - taken
            if want.isolated and len(free_isolated) >= want.exclusive:
                isolated = True
            elif len(shared) >= want.exclusive:
                remaining -= want.exclusive
            else:
                return None
        # A shared pool in use is never sliced empty; an idle one may be.
        if (users or uses_shared) and (remaining < 1 or remaining * 1000 < load + shared_part):
            return None
        return Candidate(pool, isolated, remaining * 1000 - load - shared_part)

    def _level_pools(self, level: str) -> list[int]:
        existing = [lv for lv in LEVELS if any(p.level == lv for p in self.pools)]
        target = LEVELS.index(level) if level in LEVELS else 1
        usable = [lv for lv in existing if LEVELS.index(lv) <= target] or existing[:1]
        return [p.index for p in self.pools if p.level == usable[-1]]

    def choose(self, want: Want, hint: str | None = None) -> Candidate | None:
        taken = self.cache.exclusive_cpus()
        usage = self._usage()
        if hint is not None and hint in self.index:
            fit = self._fit(self.index[hint], want, usage, taken)
            if fit is not None:
                return fit
        pools = [p.index for p in self.pools]
        if want.kind is Kind.SHARED and want.unlimited:
            pools = self._level_pools(self.spec.unlimited_burstable)
        fits = [f for f in (self._fit(i, want, usage, taken) for i in pools) if f]
        if not fits:
            return None

        def score(c: Candidate) -> tuple[int, int, int, int, int]:
            count = self._load(c.pool, usage, taken)[2]
            depth = self.pools[c.pool].depth
            return (int(c.isolated and want.isolated), depth, c.capacity, -count, -c.pool)

        return max(fits, key=score)

    # -- grants ---------------------------------------------------------------------------

    def grant(
        self,
        cid: str,
        pod_id: str,
        name: str,
        want: Want,
        hint: str | None = None,
        keep_mems: bool = False,
    ) -> Allocation:
        """Place a container, falling back to shared CPUs (and then to over-committing the
        roomiest pool) rather than failing."""
        base = Allocation(
            cid, pod_id, name, self.pools[0].name, want.kind, want.request, keep_mems=keep_mems
        )
        if want.kind in (Kind.RESERVED, Kind.PRESERVE):
            return self._store(base)
        candidate = self.choose(want, hint)
        if candidate is None and want.exclusive:
            log.warning(
                "%s: cannot give %d exclusive CPUs (%d mCPU requested); using shared CPUs",
                name,
                want.exclusive,
                want.request,
            )
            want = Want(Kind.SHARED, request=want.request)
            base = attrs.evolve(base, kind=Kind.SHARED)
            candidate = self.choose(want, hint)
        if candidate is None:
            pool = self._roomiest_pool()
            log.warning("%s: shared CPUs over-committed; placing in %s", name, pool.name)
            return self._store(attrs.evolve(base, pool=pool.name))
        pool = self.pools[candidate.pool]
        exclusive = CpuSet()
        if want.exclusive:
            taken = self.cache.exclusive_cpus()
            source = (
                self.isolated_of[pool.index] if candidate.isolated else (self.sharable[pool.index])
            )
            exclusive = pick_cpus(self.system, source - taken, want.exclusive)
        return self._store(
            attrs.evolve(base, pool=pool.name, exclusive=exclusive, isolated=candidate.isolated)
        )

    def _roomiest_pool(self) -> Pool:
        taken = self.cache.exclusive_cpus()
        return max(self.pools, key=lambda p: (len(self.shared_cpus(p.index, taken)), -p.index))

    def _store(self, allocation: Allocation) -> Allocation:
        self.cache.put(allocation)
        return allocation

    def release(self, cid: str) -> Allocation | None:
        return self.cache.pop(cid)

    # -- what the grants mean for the runtime ---------------------------------------------

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
        mems = None if (a.keep_mems or not self.spec.pin_memory) else pool.mems
        return (cpus if self.spec.pin_cpu else None), mems

    def _shared_of(self, pool: int, taken: CpuSet | None, shared: list[CpuSet] | None) -> CpuSet:
        return shared[pool] if shared is not None else self.shared_cpus(pool, taken)

    def adjustment(self, a: Allocation) -> Adjustment:
        cpus, mems = self.desired(a)
        self.cache.put(attrs.evolve(a, cpus=cpus, mems=mems))
        return Adjustment(
            cpuset_cpus=None if cpus is None else str(cpus),
            cpuset_mems=None if mems is None else str(mems),
            cpu_shares=None if a.kind is Kind.PRESERVE else milli_cpu_to_shares(_portion(a)),
        )

    def unsettle(self) -> None:
        """Allocations were stored with cpusets the engine did not choose (restore): the next
        ``refresh`` checks every container, not only after a change of the shared sets."""
        self._settled = None

    def refresh(self, skip: str | None = None) -> list[Update]:
        """Updates for every container whose cpuset or mems no longer match its grant.

        A container's wanted cpuset depends only on its own grant (kept in line when granted)
        and its pool's shared CPUs, so while no shared set changed there is nothing to do:
        placing a shared container stays O(pools), not O(containers).
        """
        taken = self.cache.exclusive_cpus()
        shared = [self.shared_cpus(p.index, taken) for p in self.pools]
        if shared == self._settled:
            return []
        self._settled = shared
        updates: list[Update] = []
        for a in sorted(self.cache, key=lambda a: a.container_id):
            if a.container_id == skip:
                continue
            cpus, mems = self.desired(a, taken, shared)
            if (cpus, mems) == (a.cpus, a.mems):
                continue
            self.cache.put(attrs.evolve(a, cpus=cpus, mems=mems))
            updates.append(
                Update(
                    a.container_id,
                    Adjustment(
                        cpuset_cpus=None if cpus is None or cpus == a.cpus else str(cpus),
                        cpuset_mems=None if mems is None or mems == a.mems else str(mems),
                    ),
                )
            )
        return updates


def _portion(a: Allocation) -> int:
    if a.kind is Kind.EXCLUSIVE:
        return 1000 * len(a.exclusive)
    if a.kind is Kind.MIXED:
        return a.request % 1000
    return a.request
