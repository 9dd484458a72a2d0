"""Picking ``count`` CPUs out of a free set by nri-plugins' ``pkg/cpuallocator`` rules.

The steps, each working on what the previous ones left (allocatorHelper.allocate):

1. whole idle packages (all of a package's CPUs of the preferred priority are free), most
   preferred first, then lowest id, while the request still needs a whole package;
1a. on hybrid machines, whole idle CPU clusters of the right core kind (``clusters.py``);
2. cache groups (``topology.py``), for two CPUs or more: whole idle groups first, from the
   tightest-fitting die and package, the last one split if need be; then partly used
   groups of the same package, an exactly-sized one if there is one, else the biggest
   first;
3. whole idle cores, most preferred first, then lowest id;
4. single threads, preferring the package the result already uses, the package ranked best
   for the priority, the lower package id, the CPU's own priority, the package and then the
   core with the fewest free CPUs (keeping idle ones whole), and the lowest id.

Releasing ``count`` CPUs keeps what allocating ``len(held) - count`` from them would pick.
On hybrid machines cache groups of the wrong core kind are skipped, as upstream does.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterable

import attrs

from nri_resmgr.cpus.clusters import take_idle_clusters
from nri_resmgr.cpus.priority import Priority, rank
from nri_resmgr.cpus.topology import CacheGroup, Topology, topology_of
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.sysfs import System
from nri_resmgr.sysfs.cpudetails import CoreKind

__all__ = ["allocate_cpus", "release_cpus"]


def allocate_cpus(
    system: System, free: CpuSet, count: int, prefer: Priority = Priority.NONE
) -> CpuSet:
    """``count`` CPUs of ``free``; all of ``free`` if it has no more. The caller checks size."""
    if count <= 0:
        return CpuSet()
    if count >= len(free):
        return free
    return _Helper(topology_of(system), free, count, prefer).allocate()


def release_cpus(
    system: System, held: CpuSet, count: int, prefer: Priority = Priority.NONE
) -> CpuSet:
    """Which ``count`` of ``held`` to give back: the rest is what an allocation would keep."""
    if count <= 0:
        return CpuSet()
    if count >= len(held):
        return held
    return held - allocate_cpus(system, held, len(held) - count, prefer)


@attrs.define
class _Helper:
    topo: Topology
    free: CpuSet
    count: int
    prefer: Priority
    result: CpuSet = attrs.field(factory=CpuSet)
    whole_steps: bool = True
    """False for splitting a cache group: only idle cores and threads then."""

    def allocate(self) -> CpuSet:
        if self.whole_steps:
            self._idle_packages()
            if self.count > 0 and self.topo.hybrid:
                self._take(take_idle_clusters(self.topo.clusters, self.free, self.count,
                                              self.prefer))  # fmt: skip
            if self.count > 0:
                self._cache_groups()
        if self.count > 0:
            self._idle_cores()
        if self.count > 0:
            self._idle_threads()
        return self.result if self.count == 0 else CpuSet()

    def _take(self, cpus: CpuSet) -> None:
        self.result = self.result | cpus
        self.free = self.free - cpus
        self.count -= len(cpus)

    # -- 1. packages ---------------------------------------------------------------------

    def _idle_packages(self) -> None:
        # Packages are disjoint: taking one leaves the others' idleness as it was.
        for cpus in self.topo.package_order(self.prefer):
            if self.count >= len(cpus) and cpus.issubset(self.free):
                self._take(cpus)
                if self.count == 0:
                    return

    # -- 3. cores ------------------------------------------------------------------------

    def _idle_cores(self) -> None:
        # Taking a core leaves the other cores' idleness as it was: one scan in rank order,
        # and one set difference for all the cores taken (a big machine's free set is big).
        order, position = self.topo.core_order(self.prefer)
        free = self.free
        candidates: Iterable[CpuSet] = order
        if len(free) * 4 < len(order):
            # Few free CPUs among many cores (a pool of a big machine): only their own cores.
            firsts = (
                p for c in free if (p := position.get(c)) is not None and order[p].issubset(free)
            )
            candidates = [order[i] for i in sorted(firsts)]
        taken: list[CpuSet] = []
        count = self.count
        for core in candidates:
            if count >= len(core) and core.issubset(free):
                taken.append(core)
                count -= len(core)
                if count == 0:
                    break
        if taken:
            self._take(CpuSet.union_all(taken))

    # -- 4. threads ----------------------------------------------------------------------

    def _idle_threads(self) -> None:
        prios = self.topo.priorities
        package_key: dict[int, tuple[object, ...]] = {}
        for p, cpus in self.topo.packages.items():
            mine = cpus & self.free
            package_key[p] = (-len(cpus & self.result), rank(prios, mine, self.prefer, self.count))
            package_key[p] += (p,)
        package_free = {p: len(cpus & self.free) for p, cpus in self.topo.packages.items()}

        # A single CPU ranks by its own priority only: one key per priority, not per CPU.
        own = {
            prio: rank(prios, cpus, self.prefer, 0)
            for prio, cpus in zip(Priority, prios, strict=False)
        }
        unranked = rank(prios, CpuSet(), self.prefer, 0)
        prio_of = self.topo.priority_of

        def key(cpu: int) -> tuple[object, ...]:
            p = self.topo.package_of[cpu]
            mine = own[prio_of[cpu]] if cpu in prio_of else unranked
            core_free = len(self.topo.cores[cpu] & self.free)
            return (*package_key[p], mine, package_free[p], core_free, cpu)

        for cpu in sorted(self.free, key=key)[: self.count]:
            self._take(CpuSet([cpu]))

    # -- 2. cache groups -----------------------------------------------------------------

    def _cache_groups(self) -> None:
        groups = self.topo.cache_groups
        if len(groups) <= 1 or self.count < 2:
            return
        s = _GroupSort.collect(self, groups)
        if s is None:
            return
        result, free, count = self.result, self.free, self.count
        for g in s.prefer:
            if count <= 0:
                break
            cpus = s.cpus[g.id]
            if count >= len(cpus):
                use = cpus
            else:
                use = _Helper(self.topo, cpus, count, self.prefer, whole_steps=False).allocate()
            result, free, count = result | use, free - use, count - len(use)
        if count > 0:
            more = self._from_used_groups(s, count)
            if more is None:
                return
            result, free, count = result | more, free - more, count - len(more)
        if count == 0:
            self.result, self.free, self.count = result, free, 0

    def _from_used_groups(self, s: _GroupSort, count: int) -> CpuSet | None:
        """``count`` CPUs of partly used groups of the chosen package (never crossing it)."""
        usable: list[CacheGroup] = []
        for g in s.usable:
            if g.package != s.package:
                break
            usable.append(g)
        for g in usable:
            if len(s.cpus[g.id]) == count:
                return s.cpus[g.id]
        # Upstream also tries "fewest groups of one size", but its condition can never hold
        # (it starts from zero groups and looks for fewer): not applied there, nor here.
        total, taken, last = 0, CpuSet(), -1
        for i, g in enumerate(usable):
            last = i
            total += len(s.cpus[g.id])
            if count <= total:
                break
        if last < 0 or total < count:
            return None
        for g in usable[: last + 1]:
            if count - len(taken) < len(s.cpus[g.id]):
                break
            taken = taken | s.cpus[g.id]
        rest = count - len(taken)
        if rest > 0:
            cpus = s.cpus[usable[last].id] - taken
            use = _Helper(self.topo, cpus, rest, self.prefer, whole_steps=False).allocate()
            if len(use) != rest:
                return None
            taken = taken | use
        return taken


@attrs.define
class _GroupSort:
    """Idle ("prefer") and partly used ("usable") cache groups, with free CPU counts per
    package and die, sorted as upstream's cacheGroupSorter sorts them."""

    prefer: list[CacheGroup]
    usable: list[CacheGroup]
    cpus: dict[int, CpuSet]
    prefer_pkg: dict[int, int]
    prefer_die: dict[tuple[int, int], int]
    usable_pkg: dict[int, int]
    usable_die: dict[tuple[int, int], int]
    full: int
    part: int
    package: int = -1

    @classmethod
    def collect(cls, a: _Helper, groups: tuple[CacheGroup, ...]) -> _GroupSort | None:
        part = a.count % len(groups[0].cpus)
        s = cls([], [], {}, defaultdict(int), defaultdict(int), defaultdict(int),
                defaultdict(int), a.count - part, part)  # fmt: skip
        for g in groups:
            if a.topo.hybrid and _wrong_kind(g, a.prefer):
                continue
            free = g.cpus & a.free
            if not free:
                continue
            s.cpus[g.id] = free
            if free == g.cpus:
                s.prefer.append(g)
                s.prefer_pkg[g.package] += len(free)
                s.prefer_die[(g.package, g.die)] += len(free)
            else:
                s.usable.append(g)
                s.usable_pkg[g.package] += len(free)
                s.usable_die[(g.package, g.die)] += len(free)
        s.prefer.sort(key=functools.cmp_to_key(s._cmp_idle))
        s.usable.sort(key=functools.cmp_to_key(s._cmp_used))
        if s.prefer:
            s.package = s.prefer[0].package
            have = s.prefer_pkg[s.package] + s.usable_pkg[s.package]
        elif s.usable:
            s.package = s.usable[0].package
            have = s.usable_pkg[s.package]
        else:
            return None
        return s if have >= a.count else None

    def _cmp_idle(self, a: CacheGroup, b: CacheGroup) -> int:
        full, part = self.full, self.part
        for fa, fb, pa, pb in (
            (
                self.prefer_die[(a.package, a.die)],
                self.prefer_die[(b.package, b.die)],
                self.usable_die[(a.package, a.die)],
                self.usable_die[(b.package, b.die)],
            ),
            (
                self.prefer_pkg[a.package],
                self.prefer_pkg[b.package],
                self.usable_pkg[a.package],
                self.usable_pkg[b.package],
            ),
        ):
            # The only die (then package) that can hold the request wins; of two that can,
            # the tighter one.
            if fa >= full > fb and pa >= part:
                return -1
            if fb >= full > fa and pb >= part:
                return 1
            if fa >= full and fb >= full:
                if pa >= part > pb:
                    return -1
                if pb >= part > pa:
                    return 1
                if pa >= part and pb >= part:
                    return (fa - fb) or (pa - pb) or _by_ids(a, b)
        return a.id - b.id

    def _cmp_used(self, a: CacheGroup, b: CacheGroup) -> int:
        if self.full > 0 and self.prefer:
            # Upstream compares package and die ids with CPU counts here (preferPkgCPUCount
            # where an id is meant), which only matches by accident; we keep the group order
            # that comparison leaves in practice: by group id.
            return a.id - b.id
        total = self.full + self.part
        da, db = self.usable_die[(a.package, a.die)], self.usable_die[(b.package, b.die)]
        if da >= total > db:
            return -1
        if db >= total > da:
            return 1
        if da >= total and db >= total:
            return (da - db) or (len(self.cpus[b.id]) - len(self.cpus[a.id])) or _by_ids(a, b)
        return 0


def _by_ids(a: CacheGroup, b: CacheGroup) -> int:
    return (a.package - b.package) or (a.die - b.die) or (a.id - b.id)


def _wrong_kind(g: CacheGroup, prefer: Priority) -> bool:
    if prefer is Priority.LOW:
        return g.kind is CoreKind.PERFORMANCE
    return g.kind is CoreKind.EFFICIENT
