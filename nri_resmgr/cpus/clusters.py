"""Whole idle CPU clusters for hybrid machines: nri-plugins ``pkg/cpuallocator``
discoverCPUClusters and takeIdleClusters, with the logical clusters of ``pkg/sysfs``.

A cluster is the CPUs of one die sharing a ``topology/cluster_id`` (a CPU without the file
is in cluster 0, as upstream reads it). Clusters that are just one core's threads (a P-core
each on Intel hybrids) are merged per die into one logical cluster, named by the id of its
first CPU; the others (a module of four E-cores) stay. Only packages with more than one
cluster contribute.

On a hybrid machine, after whole idle packages, a request takes whole idle clusters of the
right kind (E-clusters for a low-priority request, P-clusters otherwise): the tightest one
that holds the request alone, else the tightest die, then package, that does, consumed in
that order while each next cluster still fits in what is left.
"""

from __future__ import annotations

import functools
from collections import defaultdict

import attrs

from nri_resmgr.cpus.priority import Priority
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.sysfs import System
from nri_resmgr.sysfs.cpudetails import CoreKind

__all__ = ["Cluster", "discover_clusters", "take_idle_clusters"]


@attrs.frozen
class Cluster:
    package: int
    die: int
    id: int
    cpus: CpuSet
    kind: CoreKind


def discover_clusters(system: System) -> tuple[Cluster, ...]:
    """Clusters by package, die and id, of the packages that have more than one."""
    details = system.details
    by_die: dict[tuple[int, int], dict[int, set[int]]] = defaultdict(lambda: defaultdict(set))
    for cpu in system.cpus.values():
        by_die[(cpu.package, cpu.die)][details.cluster.get(cpu.id, 0)].add(cpu.id)
    out: list[Cluster] = []
    for package in sorted({p for p, _ in by_die}):
        found: list[Cluster] = []
        for (p, die), clusters in sorted(by_die.items()):
            if p != package:
                continue
            for cluster_id, cpus in sorted(_logical(system, clusters).items()):
                kind = details.core_kind(min(cpus))
                found.append(Cluster(package, die, cluster_id, cpus, kind))
        if len(found) > 1:
            out.extend(found)
    return tuple(out)


def _logical(system: System, clusters: dict[int, set[int]]) -> dict[int, CpuSet]:
    logical: dict[int, CpuSet] = {}
    threads: set[int] = set()
    for cluster_id, ids in clusters.items():
        cpus = CpuSet(ids)
        if cpus == system.cpus[min(ids)].threads:
            threads |= ids
        else:
            logical[cluster_id] = cpus
    if threads:
        first = min(threads)
        logical[system.details.cluster.get(first, 0)] = CpuSet(threads)
    return logical


def take_idle_clusters(
    clusters: tuple[Cluster, ...], free: CpuSet, count: int, prefer: Priority
) -> CpuSet:
    """The whole idle clusters (all of their CPUs in ``free``) a request for ``count`` CPUs
    takes first; possibly fewer than ``count`` CPUs, possibly none."""
    if len(clusters) <= 1:
        return CpuSet()
    low = prefer is Priority.LOW
    idle = [
        c
        for c in clusters
        if (c.kind is CoreKind.EFFICIENT) == low and c.cpus and c.cpus.issubset(free)
    ]
    if not idle:
        return CpuSet()
    per_pkg: dict[int, int] = defaultdict(int)
    per_die: dict[tuple[int, int], int] = defaultdict(int)
    for c in idle:
        per_pkg[c.package] += len(c.cpus)
        per_die[(c.package, c.die)] += len(c.cpus)

    def tightest(a: Cluster, b: Cluster) -> int:
        for na, nb in (
            (len(a.cpus), len(b.cpus)),
            (per_die[(a.package, a.die)], per_die[(b.package, b.die)]),
            (per_pkg[a.package], per_pkg[b.package]),
        ):
            if na >= count > nb:
                return -1
            if nb >= count > na:
                return 1
            if na >= count and nb >= count:
                return (na - nb) or (a.package - b.package) or (a.die - b.die) or (a.id - b.id)
        return 0  # neither fits anywhere: upstream leaves their order to its sort

    idle.sort(key=functools.cmp_to_key(tightest))
    if len(idle[0].cpus) >= count:
        return idle[0].cpus if len(idle[0].cpus) == count else CpuSet()
    taken: set[int] = set()
    for c in idle:
        if count - len(taken) < len(c.cpus):
            break
        taken |= set(c.cpus)
        if len(taken) == count:
            break
    return CpuSet(taken)
