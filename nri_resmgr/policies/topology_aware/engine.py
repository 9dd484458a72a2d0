"""Topology-aware placement: pool selection and grants (on ``Supply``, whose cpusets
``Cpusets`` keeps in line with the runtime).

Every pool's shared CPUs are its sharable CPUs minus every exclusive CPU granted anywhere, so
taking or returning exclusive CPUs changes the cpuset of shared containers in overlapping
pools; ``refresh`` turns those changes into updates.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping

from nri_resmgr.cpus import Priority, allocate_cpus
from nri_resmgr.cpus.errors import PlacementError
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.allocations import NO_CPUS, Allocation, Kind, PoolLoad
from nri_resmgr.policies.topology_aware.affinity import placed_weights
from nri_resmgr.policies.topology_aware.affinity import pool_score as affinity_score
from nri_resmgr.policies.topology_aware.cpuprefs import priority_capacity
from nri_resmgr.policies.topology_aware.cpusets import Cpusets
from nri_resmgr.policies.topology_aware.hint_sources import container_hints
from nri_resmgr.policies.topology_aware.hints import (
    ContainerHints,
    Granted,
    HintTarget,
    combine,
    hint_targets,
    pool_score,
    strict_failure,
    take_cpus,
)
from nri_resmgr.policies.topology_aware.memory import MemoryWant, memory_want
from nri_resmgr.policies.topology_aware.pools import Pool
from nri_resmgr.policies.topology_aware.preferences import Want, check_required_isolation
from nri_resmgr.policies.topology_aware.scoring import (
    LEVEL_VALUES,
    Ask,
    PoolScore,
    best,
    find_existing_level,
    memory_key,
)
from nri_resmgr.policies.topology_aware.supply import Candidate
from nri_resmgr.resmgr.model import Container, Pod

__all__ = ["Candidate", "Engine"]

log = logging.getLogger(__name__)

_IDLE = PoolLoad()


class Engine(Cpusets):
    """Pools, grants and the cpusets they imply. The cache is the only store; shared cpusets
    derive from it; outside writers (restore) must ``unsettle``.
    """

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
        taken = self.cache.exclusive_cpus()
        usage = self._usage()
        if len(self.pools) == 1:
            return self._fit(0, want, usage, taken)  # one pool, hinted or not: no choice
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
            fit = self._fit(self.index[hint], want, usage, taken)
            if fit is not None:
                return fit
        fits = []
        for p in self.pools:  # a loop, not a generator in a comprehension: two frames fewer
            fit = self._fit(p.index, want, usage, taken)
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
            memory=memory_key(self.memory, pool.mems, memory),
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
        part = want.shared_part if want.kind in (Kind.SHARED, Kind.MIXED) else 0
        shared = self.shared_cpus(pool, taken)
        return priority_capacity(self.system, shared, want.prio, want.exclusive, part)

    @functools.cached_property
    def _hint_targets(self) -> list[HintTarget]:
        return hint_targets(self.system, self.pools)

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
        verify_hints: bool = False,
    ) -> Allocation:
        """Place a container, falling back to shared CPUs (and then to over-committing the
        roomiest pool) rather than failing; PlacementError only when no CPU is sharable, or
        (``verify_hints``) when the grant fails the container's strict topology hints."""
        topo = None
        if pod is not None and container is not None:
            topo = container_hints(pod, container, self.system)
        a = self._place(cid, pod_id, name, want, hint, keep_mems, pod, container, topo)
        if verify_hints and topo is not None and topo.strict:
            failure = strict_failure(topo, self.system, self._granted(a))
            if failure is not None:
                self.release(cid)
                raise PlacementError(f"{name}: {failure}")
        return a

    def _granted(self, a: Allocation) -> Granted:
        pool = self.pools[self.index.get(a.pool, 0)]
        shared = a.kind in (Kind.SHARED, Kind.MIXED) and a.shared_part > 0
        return Granted(
            shared=self.shared_cpus(pool.index) if shared else CpuSet(),
            reserved=self.reserved if a.kind is Kind.RESERVED and a.request else CpuSet(),
            exclusive=a.exclusive,
            mems=self._mems_of(a, pool),
        )

    def _place(
        self,
        cid: str,
        pod_id: str,
        name: str,
        want: Want,
        hint: str | None,
        keep_mems: bool,
        pod: Pod | None,
        container: Container | None,
        topo: ContainerHints | None,
    ) -> Allocation:
        request = want.request

        def grant_in(
            pool: str, kind: Kind, exclusive: CpuSet = NO_CPUS, isolated: bool = False
        ) -> Allocation:
            # Built once, where the placement is known (not a root grant then a copy).
            return Allocation(
                cid, pod_id, name, pool, kind, request, exclusive, isolated,
                keep_mems=keep_mems, pod=pod, container=container,
            )  # fmt: skip

        root = self.pools[0].name
        memory = None
        if pod is not None and container is not None:
            memory = memory_want(pod, container, self.memory.available, self.memory.total)
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
            return self._place_memory(self._store(grant_in(root, Kind.SHARED)), memory)
        if want.kind in (Kind.RESERVED, Kind.PRESERVE):
            return self._place_memory(self._store(grant_in(root, want.kind)), memory)
        weights = self._affinity(cid, pod, container)
        candidate = self.choose(want, hint, weights, memory, topo)
        check_required_isolation(want, candidate is not None and candidate.isolated, name)
        if candidate is None and want.exclusive:
            log.warning(
                "%s: cannot give %d exclusive CPUs (%d mCPU requested); using shared CPUs",
                name,
                want.exclusive,
                want.request,
            )
            want = Want(Kind.SHARED, request=want.request)
            candidate = self.choose(want, hint, weights, memory, topo)
        if candidate is None:
            pool = self._roomiest_pool()
            if not self.shared_cpus(pool.index):
                raise PlacementError(
                    f"{name}: no shared CPU to run on ({want.request} mCPU requested; every "
                    f"allowed CPU is reserved, isolated or exclusive)"
                )
            log.warning("%s: shared CPUs over-committed; placing in %s", name, pool.name)
            return self._place_memory(self._store(grant_in(pool.name, want.kind)), memory)
        pool = self.pools[candidate.pool]
        exclusive = NO_CPUS
        if want.exclusive:
            if topo is not None and topo.pick:
                exclusive = take_cpus(
                    self.system, candidate.source, topo, want.exclusive, want.prio
                )
            else:
                exclusive = allocate_cpus(self.system, candidate.source, want.exclusive, want.prio)
        return self._place_memory(
            self._store(grant_in(pool.name, want.kind, exclusive, candidate.isolated)),
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

    # -- for batch placement (batch.place_all) ---------------------------------------------

    def affinity_weights(self, cid: str, pod: Pod, container: Container) -> dict[str, int] | None:
        """The pool weights ``grant`` gives the container's affinities; None without any."""
        return self._affinity(cid, pod, container)

    def store_placed(self, a: Allocation, memory: MemoryWant | None) -> Allocation:
        """Store a grant decided outside ``grant`` (by ``choose``) as ``grant`` stores its own."""
        return self._place_memory(self._store(a), memory)
