"""Which CPUs share a cache of a given level, from the caches ``system.discover`` already
read (``System.details``): balloons' l2cache sharing and loads, the DRA devices' L3 ids."""

from __future__ import annotations

from collections.abc import Iterable

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.sysfs.cpudetails import Cache
from nri_resmgr.sysfs.system import System


def shared_caches(system: System, level: int) -> dict[int, CpuSet]:
    """CPU -> the CPUs sharing its unified or data cache of ``level``; a CPU whose sysfs
    has no such cache maps to its core's threads (what an L2 usually spans)."""
    out: dict[int, CpuSet] = {}
    for cpu in system.cpus:
        shared = _shared(system.details.caches.get(cpu, ()), level)
        out[cpu] = (shared & system.online) | CpuSet([cpu]) if shared else system.core_of(cpu)
    return out


def has_level(system: System, level: int) -> bool:
    """Whether the first CPU has a unified or data cache of ``level``."""
    first = min(system.cpus, default=0)
    return _shared(system.details.caches.get(first, ()), level) is not None


def _shared(caches: Iterable[Cache], level: int) -> CpuSet | None:
    return next((c.cpus for c in caches if c.level == level and c.kind != "Instruction"), None)
