"""What the CPU allocator looks CPUs up by, computed once per discovered system: package and
core CPU sets, CPU priorities, core kinds and the cache groups.

Cache groups follow nri-plugins ``pkg/cpuallocator`` discoverCacheGroups: the highest cache
level (below L1) whose sharing sets are neither a core's threads, a die nor a package gives
the groups (for example the L3 complexes of an AMD EPYC); a package contributes groups only
when it has more than one; groups are numbered by package, die, NUMA node and first CPU,
and a group spanning packages or NUMA nodes disables grouping altogether.
"""

from __future__ import annotations

import logging
import weakref
from typing import NamedTuple

import attrs

from nri_resmgr.cpus.clusters import Cluster, discover_clusters
from nri_resmgr.cpus.priority import (
    Priorities,
    Priority,
    discover_priorities,
    rank,
)
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.sysfs import System
from nri_resmgr.sysfs.cpudetails import CoreKind

__all__ = ["CacheGroup", "Topology", "topology_of"]

log = logging.getLogger(__name__)


@attrs.frozen
class CacheGroup:
    id: int
    package: int
    die: int
    node: int
    cpus: CpuSet
    kind: CoreKind


@attrs.frozen
class Topology:
    """Holds no reference to its System, so that the cache below lets Systems go."""

    packages: dict[int, CpuSet]
    package_of: dict[int, int]
    cores: dict[int, CpuSet]
    """CPU -> the online threads of its core."""
    priorities: Priorities
    priority_of: dict[int, Priority]
    kinds: dict[CoreKind, CpuSet]
    """More than one entry only on hybrid machines."""
    cache_groups: tuple[CacheGroup, ...]
    cache_level: int
    """The cache level the groups come from; -1 when no level groups CPUs usefully."""
    clusters: tuple[Cluster, ...] = ()
    """CPU clusters (``clusters.py``); only looked up on hybrid machines."""
    online: CpuSet = attrs.field(factory=CpuSet)

    _core_orders: dict[Priority, CoreOrder] = attrs.field(factory=dict, eq=False, repr=False)
    """Memo of ``core_order``."""
    _package_orders: dict[Priority, tuple[CpuSet, ...]] = attrs.field(
        factory=dict, eq=False, repr=False
    )
    """Memo of ``package_order``."""

    @property
    def hybrid(self) -> bool:
        return len(self.kinds) > 1

    def package_order(self, prefer: Priority) -> tuple[CpuSet, ...]:
        """Every package's CPUs of the ``prefer`` priority (all of them for none), in the
        order whole idle packages are taken: by how the package ranks, then by its id."""
        order = self._package_orders.get(prefer)
        if order is None:
            ids = sorted(self.packages, key=lambda p: (self._package_rank(p, prefer), p))
            order = self._package_orders[prefer] = tuple(
                self.packages[p]
                if prefer is Priority.NONE
                else self.packages[p] & self.priorities[prefer]
                for p in ids
            )
        return order

    def _package_rank(self, package: int, prefer: Priority) -> tuple[int, ...]:
        return rank(self.priorities, self.packages[package], prefer, -1)

    def core_order(self, prefer: Priority) -> CoreOrder:
        """Every core with an online thread, in the order idle cores are taken for
        ``prefer``: by how the core ranks for it, then by its first CPU. Both depend only on
        the hardware, so a pick scans this instead of ranking and sorting its free cores."""
        order = self._core_orders.get(prefer)
        if order is None:
            firsts = [(cpu, core) for cpu, core in self.cores.items() if core and min(core) == cpu]
            firsts.sort(key=lambda c: (rank(self.priorities, c[1], prefer, -1), c[0]))
            order = self._core_orders[prefer] = CoreOrder(
                tuple(core for _, core in firsts), {cpu: i for i, (cpu, _) in enumerate(firsts)}
            )
        return order


class CoreOrder(NamedTuple):
    cores: tuple[CpuSet, ...]
    position: dict[int, int]
    """A core's first CPU -> the core's index in ``cores``."""


_TOPOLOGIES: dict[int, tuple[weakref.ref[System], Topology]] = {}


def topology_of(system: System) -> Topology:
    """The (cached) allocator topology of ``system``; a System is immutable, so computed once."""
    cached = _TOPOLOGIES.get(id(system))
    if cached is not None and cached[0]() is system:
        return cached[1]
    topology = _build(system)
    key = id(system)

    def forget(_: object) -> None:
        _TOPOLOGIES.pop(key, None)

    _TOPOLOGIES[key] = (weakref.ref(system, forget), topology)
    return topology


def _build(system: System) -> Topology:
    packages = {p: system.package_cpus(p) for p in system.packages()}
    package_of = {c.id: c.package for c in system.cpus.values()}
    online = system.online
    cores = {c.id: c.threads & online for c in system.cpus.values()}
    kinds = dict(system.details.core_kinds)
    level = _grouping_level(system)
    groups = _cache_groups(system, level) if level > 0 else ()
    if level > 0:
        log.info("CPU allocator: %d cache groups from L%d caches", len(groups), level)
    prios = discover_priorities(system)
    priority_of = {cpu: Priority(i) for i, cpus in enumerate(prios) for cpu in cpus}
    clusters = discover_clusters(system) if len(kinds) > 1 else ()
    return Topology(
        packages, package_of, cores, prios, priority_of, kinds, groups, level, clusters, online
    )


def _trivial(system: System, cpu: int, cpus: CpuSet) -> bool:
    c = system.cpus[cpu]
    online = system.online
    return (
        len(cpus) <= 1
        or cpus == (c.threads & online)
        or cpus == system.die_cpus(c.package, c.die)
        or cpus == system.package_cpus(c.package)
    )


def _grouping_level(system: System) -> int:
    details = system.details
    for cpu in system.online:
        caches = details.caches.get(cpu, ())
        # Upstream walks levels from the number of this CPU's caches minus one down to 1.
        for level in range(len(caches) - 1, 0, -1):
            cpus = details.cache_cpus(cpu, level) or CpuSet()
            if not _trivial(system, cpu, cpus):
                return level
    return -1


def _cache_groups(system: System, level: int) -> tuple[CacheGroup, ...]:
    details = system.details
    online = system.online
    found: list[tuple[int, int, int, CpuSet, CoreKind]] = []
    for package in system.packages():
        groups: list[tuple[int, int, int, CpuSet, CoreKind]] = []
        assigned: set[int] = set()
        for cpu in system.package_cpus(package):
            if cpu in assigned:
                continue
            cpus = (details.cache_cpus(cpu, level) or system.cpus[cpu].threads) & online
            if _trivial(system, cpu, cpus):
                continue
            c = system.cpus[cpu]
            groups.append((c.package, c.die, c.node, cpus, details.core_kind(cpu)))
            assigned.update(cpus)
        if len(groups) > 1:
            found.extend(groups)
    by_die = True
    for pkg, die, node, cpus, _ in found:
        members = [system.cpus[c] for c in cpus]
        if any(m.package != pkg or m.node != node for m in members):
            log.warning("CPU allocator: cache group %s spans packages or NUMA nodes; unused", cpus)
            return ()
        if any(m.die != die for m in members):
            by_die = False
    found.sort(key=lambda g: (g[0], g[1] if by_die else 0, g[2], min(g[3])))
    return tuple(CacheGroup(i, *g) for i, g in enumerate(found))
