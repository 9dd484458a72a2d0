"""Hardware topology discovered from sysfs."""

from nri_resmgr.sysfs.system import Cpu, MemoryType, NumaNode, SysfsError, System, discover

__all__ = ["Cpu", "MemoryType", "NumaNode", "SysfsError", "System", "discover"]
