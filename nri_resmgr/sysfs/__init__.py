"""Hardware topology discovered from sysfs."""

from nri_resmgr.sysfs.system import Cpu, NumaNode, SysfsError, System, discover

__all__ = ["Cpu", "NumaNode", "SysfsError", "System", "discover"]
