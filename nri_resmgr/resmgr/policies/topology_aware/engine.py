"""Topology-aware bookkeeping: pool supply, pool selection, grants and the cpusets they imply.

Every pool's shared CPUs are its sharable CPUs minus every exclusive CPU granted anywhere, so
taking or returning exclusive CPUs changes the cpuset of shared containers in overlapping
pools; ``refresh`` turns those changes into updates.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import attrs

from nri_resmgr.config.models import TopologyAwareSpec
from nri_resmgr.resmgr.annotations import lookup_bool
from nri_resmgr.resmgr.cache import Allocation, AllocationCache, Kind, PoolLoad, follow
from nri_resmgr.resmgr.cpualloc import PlacementError
from nri_resmgr.resmgr.cpuallocator import allocate_cpus
from nri_resmgr.resmgr.cpuset import CpuSet
from nri_resmgr.resmgr.model import Adjustment, Container, Pod, Update
from nri_resmgr.resmgr.policies.topology_aware.affinity import placed_weights
from nri_resmgr.resmgr.policies.topology_aware.affinity import pool_score as affinity_score
from nri_resmgr.resmgr.policies.topology_aware.cpuprefs import check_required_isolation
from nri_resmgr.resmgr.policies.topology_aware.memory import (
    MemoryWant,
    memory_key,
    memory_want,
)
from nri_resmgr.resmgr.policies.topology_aware.memzones import MemoryAllocator
from nri_resmgr.resmgr.policies.topology_aware.pools import Pool, ancestors, subtree
from nri_resmgr.resmgr.policies.topology_aware.preferences import Want
from nri_resmgr.resmgr.policies.topology_aware.scoring import (
    LEVEL_VALUES,
    Ask,
    PoolScore,
    best,
    children_first,
    find_existing_level,
)
from nri_resmgr.resmgr.requests import milli_cpu_to_shares
from nri_resmgr.sysfs import System

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


class Engine:
    """Pools, grants and the cpusets they imply. The cache is the only store; shared cpusets
    derive from it; outside writers (restore) must ``unsettle``.

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
        """The subtree's load plus this pool's part of its ancestors' shared containers; a
        subtree holding containers that ask no CPU counts 1 mCPU more (nri-plugins
        AllocatableSharedCPU), so they are never left without a CPU."""
        own_load = self._subtree_load(pool, usage)
        mcpu = own_load.shared_mcpu + (1 if own_load.zero_requests else 0)
        own = len(self.shared_cpus(pool, taken))
        for a in self.ancestors[pool]:
            part = usage.get(a, _IDLE).shared_mcpu
            wider = len(self.shared_cpus(a, taken))
            if part and wider:
                # An ancestor's shared containers spread over all of its CPUs.
                mcpu += part * own // wider
        return own_load._replace(shared_mcpu=mcpu)

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

    # -- selection ------------------------------------------------------------------------

    def _fit(
        self, pool: int, want: Want, usage: dict[int, PoolLoad], taken: CpuSet
    ) -> Candidate | None:
        shared = self.shared_cpus(pool, taken)
        load = self._load(pool, usage, taken).shared_mcpu
        uses_shared = want.kind in (Kind.SHARED, Kind.MIXED)
        shared_part = want.shared_part if uses_shared else 0
        remaining = len(shared)
        isolated = False
        source = CpuSet()
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

    def choose(
        self,
        want: Want,
        hint: str | None = None,
        affinity: Mapping[str, int] | None = None,
        memory: MemoryWant | None = None,
    ) -> Candidate | None:
        """The best fitting pool for ``want`` (the hinted one if it fits), in nri-plugins'
        order (``scoring.compare``); ``affinity`` weighs pools by name; None if none fits."""
        taken = self.cache.exclusive_cpus()
        usage = self._usage()
        if hint is not None and hint in self.index:
            fit = self._fit(self.index[hint], want, usage, taken)
            if fit is not None:
                return fit
        fits = [f for f in (self._fit(p.index, want, usage, taken) for p in self.pools) if f]
        if not fits:
            return None
        if len(fits) == 1:
            return fits[0]
        ask = self._ask(want)
        weights = {self.index[n]: w for n, w in (affinity or {}).items() if n in self.index}
        scores = [self._score(c, want, usage, taken, weights, memory) for c in fits]
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
        )

    def _score(
        self,
        c: Candidate,
        want: Want,
        usage: dict[int, PoolLoad],
        taken: CpuSet,
        weights: Mapping[int, int],
        memory: MemoryWant | None = None,
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
            memory=memory_key(self.memory, pool.mems, memory),
        )

    # -- grants ---------------------------------------------------------------------------

    def grant(
        self,
        cid: str,
        pod_id: str,
        name: str,
        want: Want,
        hint: str | None = None,
        keep_mems: bool = False,
        pod: Pod | None = None,
        container: Container | None = None,
    ) -> Allocation:
        """Place a container, falling back to shared CPUs (and then to over-committing the
        roomiest pool) rather than failing; PlacementError only when no CPU is sharable."""
        base = Allocation(
            cid,
            pod_id,
            name,
            self.pools[0].name,
            want.kind,
            want.request,
            keep_mems=keep_mems,
            pod=pod,
            container=container,
        )
        memory = None
        if pod is not None and container is not None:
            memory = memory_want(pod, container, self.memory.available)
        if (
            want.kind is Kind.RESERVED
            and want.request > 0
            and self._free_reserved(cid) < want.request
        ):
            # nri-plugins supply.AllocateCPU: more than the reserved CPUs have left goes to
            # the normal shared CPUs rather than over-committing the reserved ones.
            log.warning(
                "%s: needs %d mCPU reserved, only %d available; using normal shared CPUs",
                name,
                want.request,
                self._free_reserved(cid),
            )
            # The pool stays the root, where reserved requests are placed (nri-plugins
            # pools.go allocatePool), so the container gets the root's whole shared set.
            base = attrs.evolve(base, kind=Kind.SHARED)
            return self._place_memory(self._store(base), memory)
        if want.kind in (Kind.RESERVED, Kind.PRESERVE):
            return self._place_memory(self._store(base), memory)
        weights = self._affinity(cid, pod, container)
        candidate = self.choose(want, hint, weights, memory)
        check_required_isolation(want, candidate is not None and candidate.isolated, name)
        if candidate is None and want.exclusive:
            log.warning(
                "%s: cannot give %d exclusive CPUs (%d mCPU requested); using shared CPUs",
                name,
                want.exclusive,
                want.request,
            )
            want = Want(Kind.SHARED, request=want.request)
            base = attrs.evolve(base, kind=Kind.SHARED)
            candidate = self.choose(want, hint, weights, memory)
        if candidate is None:
            pool = self._roomiest_pool()
            if not self.shared_cpus(pool.index):
                raise PlacementError(
                    f"{name}: no shared CPU to run on ({want.request} mCPU requested; every "
                    f"allowed CPU is reserved, isolated or exclusive)"
                )
            log.warning("%s: shared CPUs over-committed; placing in %s", name, pool.name)
            return self._place_memory(self._store(attrs.evolve(base, pool=pool.name)), memory)
        pool = self.pools[candidate.pool]
        exclusive = CpuSet()
        if want.exclusive:
            exclusive = allocate_cpus(self.system, candidate.source, want.exclusive, want.prio)
        return self._place_memory(
            self._store(
                attrs.evolve(base, pool=pool.name, exclusive=exclusive, isolated=candidate.isolated)
            ),
            memory,
        )

    def _free_reserved(self, cid: str) -> int:
        """mCPU of the reserved CPUs not yet granted to reserved containers (but ``cid``)."""
        granted = sum(
            a.request for a in self.cache if a.kind is Kind.RESERVED and a.container_id != cid
        )
        return 1000 * len(self.reserved) - granted

    def _affinity(
        self, cid: str, pod: Pod | None, container: Container | None
    ) -> dict[str, int] | None:
        if pod is None or container is None:
            return None
        return placed_weights(cid, pod, container, self.spec, self.cache)

    def _place_memory(self, a: Allocation, memory: MemoryWant | None) -> Allocation:
        pool = self.pools[self.index.get(a.pool, 0)]
        if self.memory.place(a, pool.mems, memory):
            self._settled = None  # other containers' memory zones moved
        return a

    def _roomiest_pool(self) -> Pool:
        taken = self.cache.exclusive_cpus()
        return max(self.pools, key=lambda p: (len(self.shared_cpus(p.index, taken)), -p.index))

    def _store(self, allocation: Allocation) -> Allocation:
        self.cache.put(allocation)
        return allocation

    def release(self, cid: str) -> Allocation | None:
        self.memory.release(cid)
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
            attrs.evolve(
                a,
                cpus=cpus if cpus is not None or held is None else held.cpus,
                mems=mems if mems is not None or held is None else held.mems,
            )
        )
        return Adjustment(
            cpuset_cpus=None if cpus is None else str(cpus),
            cpuset_mems=None if mems is None else str(mems),
            cpu_shares=None if a.kind is Kind.PRESERVE else milli_cpu_to_shares(_portion(a)),
        )

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
        for a in sorted(self._unsettled(shared, settled), key=lambda a: a.container_id):
            if a.container_id == skip:
                continue
            cpus, mems = self.desired(a, taken, shared)
            # A tuple compares by identity first: the common case costs no __eq__ call.
            if (cpus, mems) == (a.cpus, a.mems):
                continue
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
