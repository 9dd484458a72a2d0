"""CPU caches from ``<host_root>/sys/devices/system/cpu/cpuN/cache/indexM``: which CPUs
share a cache of a given level. Additive to ``system.discover``: read when a policy needs
cache topology (balloons' l2cache sharing and loads)."""

from __future__ import annotations

from pathlib import Path

from nri_resmgr.resmgr.cpuset import CpuSet, CpuSetError
from nri_resmgr.sysfs.system import System, _read


def shared_caches(system: System, host_root: str, level: int) -> dict[int, CpuSet]:
    """CPU -> the CPUs sharing its unified or data cache of ``level``; a CPU whose sysfs
    has no such cache maps to its core's threads (what an L2 usually spans)."""
    cpu_dir = Path(host_root or "/") / "sys/devices/system/cpu"
    out: dict[int, CpuSet] = {}
    for cpu in system.cpus:
        shared = _shared(cpu_dir / f"cpu{cpu}" / "cache", level)
        out[cpu] = (shared & system.online) | CpuSet([cpu]) if shared else system.core_of(cpu)
    return out


def _shared(cache_dir: Path, level: int) -> CpuSet | None:
    if not cache_dir.is_dir():
        return None
    for index in sorted(cache_dir.glob("index*")):
        if _read(index / "level") != str(level) or _read(index / "type") == "Instruction":
            continue
        try:
            return CpuSet.parse(_read(index / "shared_cpu_list") or "")
        except CpuSetError:
            return None
    return None
