"""CPUs close to a device named by its sysfs path (``preferCloseToDevices``), read under
the host root: a NUMA node's CPUs for ``/sys/devices/system/node/nodeN``, else the device's
``local_cpulist`` (PCI devices) or ``shared_cpu_list`` (CPU caches), following ``device``
links (``/sys/class/net/eth0``), else the CPUs of its ``numa_node``."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from nri_resmgr.cpuset import CpuSet, CpuSetError
from nri_resmgr.sysfs import System

log = logging.getLogger(__name__)

_NODE = re.compile(r"^/sys/devices/system/node/node(\d+)/?$")


def close_cpus(system: System, host_root: str, device: str) -> CpuSet | None:
    """The CPUs close to ``device``; None (logged) if its locality cannot be read."""
    m = _NODE.match(device)
    if m:
        node = system.nodes.get(int(m.group(1)))
        if node is None:
            log.error("preferCloseToDevices: %s: no such NUMA node", device)
            return None
        return node.cpus
    path = Path(host_root or "/") / device.lstrip("/")
    for d in (path, path / "device"):
        # local_cpulist: a PCI device; shared_cpu_list: a CPU cache (cpuN/cache/indexM).
        cpus = _read_cpulist(d / "local_cpulist") or _read_cpulist(d / "shared_cpu_list")
        if cpus is not None:
            return cpus & system.online
        nid = _read_int(d / "numa_node")
        if nid is not None and nid in system.nodes:
            return system.nodes[nid].cpus
    log.error("preferCloseToDevices: %s: no local_cpulist or numa_node under %s", device, path)
    return None


def _read_cpulist(p: Path) -> CpuSet | None:
    try:
        return CpuSet.parse(p.read_text().strip())
    except (OSError, CpuSetError):
        return None


def _read_int(p: Path) -> int | None:
    try:
        return int(p.read_text().strip())
    except (OSError, ValueError):
        return None
