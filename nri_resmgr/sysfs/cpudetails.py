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
from collections.abc import Mapping
from pathlib import Path

import attrs

from nri_resmgr.resmgr.cpuset import CpuSet, CpuSetError

__all__ = ["Cache", "CoreKind", "CpuDetails", "Epp", "read_details"]


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
        preference = _text(path / "cpufreq/energy_performance_preference")
        if preference is not None:
            epp[cpu] = _EPP_NAMES.get(preference, Epp.UNKNOWN)
        cluster_id = _int(path / "topology/cluster_id")
        if cluster_id is not None:
            cluster[cpu] = cluster_id
    return CpuDetails(caches, freq, epp, _core_kinds(sys_dir, online), cluster)


def _core_kinds(sys_dir: Path, online: CpuSet) -> dict[CoreKind, CpuSet]:
    # As pkg/sysfs: without cpu_core/cpus every online CPU is a performance core; a machine
    # with one kind only is not hybrid, and then the kinds do not matter.
    kinds = {
        CoreKind.PERFORMANCE: _cpus(sys_dir / "devices/cpu_core/cpus") or online,
        CoreKind.EFFICIENT: _cpus(sys_dir / "devices/cpu_atom/cpus") or CpuSet(),
    }
    kinds = {k: v & online for k, v in kinds.items() if v & online}
    return kinds if len(kinds) > 1 else {}


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
        kind = _text(index / "type") or "Unified"
        # pkg/sysfs needs the id; a cache without one is told apart by its first CPU.
        out.append(
            Cache(level, kind, cache_id if cache_id is not None else min(cpus, default=0), cpus)
        )
    out.sort(key=lambda c: c.level)
    return tuple(out)


def _text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _int(path: Path) -> int | None:
    text = _text(path)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _cpus(path: Path) -> CpuSet | None:
    text = _text(path)
    if text is None:
        return None
    try:
        return CpuSet.parse(text)
    except CpuSetError:
        return None
