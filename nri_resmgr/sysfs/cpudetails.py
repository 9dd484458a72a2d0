"""Per-CPU details the CPU allocator ranks CPUs by, read from ``<host_root>/sys``: caches
(``cpuN/cache/indexM/{level,type,id,shared_cpu_list}``), base frequency and energy
performance preference (``cpuN/cpufreq/{base_frequency,energy_performance_preference}``),
the hybrid core kind (``devices/cpu_core/cpus``, ``devices/cpu_atom/cpus``) and the cluster
id (``cpuN/topology/cluster_id``), as nri-plugins' ``pkg/sysfs`` discovers them.

Every file is optional: a machine without them has no cache groups, one CPU priority and
one core kind, which is what the allocator then assumes.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from pathlib import Path

import attrs

from nri_resmgr.cpuset import CpuSet, CpuSetError
from nri_resmgr.sysfs.files import read_attr

__all__ = ["Cache", "CoreKind", "CpuDetails", "Epp", "read_details"]

log = logging.getLogger(__name__)


class CoreKind(enum.IntEnum):
    PERFORMANCE = 0
    EFFICIENT = 1


class Epp(enum.IntEnum):
    """cpufreq energy performance preference; a higher value prefers power over speed."""

    PERFORMANCE = 0
    BALANCE_PERFORMANCE = 1
    BALANCE_POWER = 2
    POWER = 3
    UNKNOWN = 4


_EPP_NAMES = {
    "performance": Epp.PERFORMANCE,
    "balance_performance": Epp.BALANCE_PERFORMANCE,
    "balance_power": Epp.BALANCE_POWER,
    "power": Epp.POWER,
}


@attrs.frozen
class Cache:
    level: int
    kind: str
    """``Data``, ``Instruction`` or ``Unified``."""
    id: int
    cpus: CpuSet
    """The CPUs sharing this cache (as sysfs lists them, offline ones included)."""


@attrs.frozen
class CpuDetails:
    caches: Mapping[int, tuple[Cache, ...]] = attrs.field(factory=dict)
    """CPU -> its caches, lowest level first (the order of the ``index*`` directories)."""
    base_frequency: Mapping[int, int] = attrs.field(factory=dict)
    """CPU -> base frequency in kHz; absent when unknown."""
    epp: Mapping[int, Epp] = attrs.field(factory=dict)
    core_kinds: Mapping[CoreKind, CpuSet] = attrs.field(factory=dict)
    """Only on hybrid machines; empty means every CPU is a performance core."""
    cluster: Mapping[int, int] = attrs.field(factory=dict)
    """CPU -> cluster id, for the CPUs whose sysfs has ``topology/cluster_id``."""

    def cache_cpus(self, cpu: int, level: int) -> CpuSet | None:
        """The CPUs sharing any of ``cpu``'s caches of ``level``; None if it has no caches."""
        caches = self.caches.get(cpu)
        if not caches:
            return None
        return CpuSet.union_all(c.cpus for c in caches if c.level == level)

    def core_kind(self, cpu: int) -> CoreKind:
        efficient = self.core_kinds.get(CoreKind.EFFICIENT)
        return CoreKind.EFFICIENT if efficient and cpu in efficient else CoreKind.PERFORMANCE


def read_details(host_root: str, online: CpuSet) -> CpuDetails:
    """What sysfs says about ``online`` CPUs; unreadable or malformed files count as absent."""
    sys_dir = Path(host_root or "/") / "sys"
    cpu_dir = sys_dir / "devices/system/cpu"
    caches: dict[int, tuple[Cache, ...]] = {}
    freq: dict[int, int] = {}
    epp: dict[int, Epp] = {}
    cluster: dict[int, int] = {}
    for cpu in online:
        path = cpu_dir / f"cpu{cpu}"
        found = _caches(path / "cache")
        if found:
            caches[cpu] = found
        base = _int(path / "cpufreq/base_frequency")
        if base is not None and base > 0:
            freq[cpu] = base
        preference = read_attr(path / "cpufreq/energy_performance_preference")
        if preference is not None:
            epp[cpu] = _EPP_NAMES.get(preference, Epp.UNKNOWN)
        cluster_id = _int(path / "topology/cluster_id")
        if cluster_id is not None:
            cluster[cpu] = cluster_id
    return CpuDetails(caches, freq, epp, _core_kinds(sys_dir, online), cluster)


def _core_kinds(sys_dir: Path, online: CpuSet) -> dict[CoreKind, CpuSet]:
    """The hybrid core kinds as pkg/sysfs settles them (discoverCPUs, checkCoreKinds).

    One kind listed (the other file missing or empty) is completed to whole cores and the
    other kind is every other online CPU; no kind, or one covering every CPU, is not hybrid.
    (Upstream completes a lone kind given by its OVERRIDE_SYS_{ATOM,CORE}_CPUS, or a lone
    ``cpu_core/cpus``; a lone ``cpu_atom/cpus`` it refuses, having taken every CPU as a
    P-core for the missing file.) Two kinds must each hold whole cores, not overlap and cover
    the online CPUs; upstream refuses to start otherwise, here the problem is logged and the
    machine is taken as non-hybrid.
    """
    paths = {
        CoreKind.PERFORMANCE: sys_dir / "devices/cpu_core/cpus",
        CoreKind.EFFICIENT: sys_dir / "devices/cpu_atom/cpus",
    }
    given = {k: (_cpus(p) or CpuSet()) & online for k, p in paths.items()}
    given = {k: v for k, v in given.items() if v}
    if not given:
        return {}
    threads = _ThreadsOf(sys_dir / "devices/system/cpu", online)
    if len(given) == 1:
        ((kind, cpus),) = given.items()
        whole = threads.complete(cpus)
        if whole == online:
            return {}
        other = CoreKind.EFFICIENT if kind is CoreKind.PERFORMANCE else CoreKind.PERFORMANCE
        return {kind: whole, other: online - whole}
    problem = _core_kinds_problem(given, threads, online)
    if problem:
        log.error("%s: %s; taking every CPU as a performance core", sys_dir / "devices", problem)
        return {}
    return given


def _core_kinds_problem(
    kinds: Mapping[CoreKind, CpuSet], threads: _ThreadsOf, online: CpuSet
) -> str | None:
    perf, eff = kinds[CoreKind.PERFORMANCE], kinds[CoreKind.EFFICIENT]
    for name, cpus in (("cpu_core", perf), ("cpu_atom", eff)):
        if missing := threads.complete(cpus) - cpus:
            return f"{name}/cpus ({cpus}) misses threads of its cores ({missing})"
    if common := perf & eff:
        return f"cpu_core/cpus ({perf}) and cpu_atom/cpus ({eff}) overlap ({common})"
    if missing := online - perf - eff:
        return f"online CPUs {missing} are in neither cpu_core/cpus nor cpu_atom/cpus"
    return None


class _ThreadsOf:
    """Whole cores: each CPU's ``topology/thread_siblings_list``, read when first asked."""

    def __init__(self, cpu_dir: Path, online: CpuSet) -> None:
        self._cpu_dir = cpu_dir
        self._online = online
        self._known: dict[int, CpuSet] = {}

    def complete(self, cpus: CpuSet) -> CpuSet:
        return CpuSet.union_all([cpus, *(self._of(c) for c in cpus)])

    def _of(self, cpu: int) -> CpuSet:
        if cpu not in self._known:
            path = self._cpu_dir / f"cpu{cpu}/topology/thread_siblings_list"
            self._known[cpu] = (_cpus(path) or CpuSet([cpu])) & self._online
        return self._known[cpu]


def _caches(cache_dir: Path) -> tuple[Cache, ...]:
    if not cache_dir.is_dir():
        return ()
    out: list[Cache] = []
    indexes = [p for p in cache_dir.glob("index*") if p.name[5:].isdigit()]
    for index in sorted(indexes, key=lambda p: int(p.name[5:])):
        level, cache_id = _int(index / "level"), _int(index / "id")
        cpus = _cpus(index / "shared_cpu_list")
        if level is None or cpus is None:
            continue
        kind = read_attr(index / "type") or "Unified"
        # pkg/sysfs needs the id; a cache without one is told apart by its first CPU.
        out.append(
            Cache(level, kind, cache_id if cache_id is not None else min(cpus, default=0), cpus)
        )
    out.sort(key=lambda c: c.level)
    return tuple(out)


def _int(path: Path) -> int | None:
    text = read_attr(path)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _cpus(path: Path) -> CpuSet | None:
    text = read_attr(path)
    if text is None:
        return None
    try:
        return CpuSet.parse(text)
    except CpuSetError:
        return None
