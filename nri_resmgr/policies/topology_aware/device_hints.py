"""Topology hints of a container's device nodes, read from sysfs as nri-plugins'
``pkg/topology`` reads them (FindGivenSysFsDevice, NewTopologyHints, getTopologyHint).

``/sys/dev/{char,block}/MAJOR:MINOR`` leads to the device's directory under
``/sys/devices``; from there up, the first directory naming CPUs (``local_cpulist``,
``cpulistaffinity``, ``cpulist``, ``shared_cpu_list``) or a NUMA node (``numa_node``, -1
meaning none) is the hint, its path the provider. A NUMA node without CPUs borrows its
parents' CPUs; without any, the number is taken as a socket (firmware that reports sockets
as nodes). A RAID's ``slaves/*`` and a VFIO device's IOMMU group members add their own.
Every path is under the daemon's ``--host-root``; providers are named without it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from nri_resmgr.cpuset import CpuSet, CpuSetError
from nri_resmgr.policies.topology_aware.hints import Hint
from nri_resmgr.resmgr.model import DeviceNode
from nri_resmgr.sysfs.files import read_attr

__all__ = ["device_hints"]

log = logging.getLogger(__name__)

_CPU_FILES = ("local_cpulist", "cpulistaffinity", "cpulist", "shared_cpu_list")
_TYPES = {"c": "char", "char": "char", "b": "block", "block": "block"}
_DEPTH = 8
"""RAID members and IOMMU groups nest; a loop of symlinks must not recurse forever."""


def device_hints(
    root: str, devices: Iterable[DeviceNode], denied: Callable[[str], bool]
) -> list[Hint]:
    """The hints of the writable ``devices``, in order, each provider once; a device whose
    sysfs path ``denied`` refuses gives none."""
    out: dict[str, Hint] = {}
    for d in devices:
        if not d.writable or _TYPES.get(d.type) is None:
            continue
        real = _real(root, f"/sys/dev/{_TYPES[d.type]}/{d.major}:{d.minor}")
        if real is None or denied(real):
            continue
        for hint in _hints(root, real, _DEPTH):
            out.setdefault(hint.provider, hint)
    return list(out.values())


def _real(root: str, path: str) -> str | None:
    """``path``'s real path, without ``root``; None when it does not exist."""
    base = os.path.realpath(root or "/")
    try:
        real = os.path.realpath(f"{base.rstrip('/')}{path}", strict=True)
    except OSError:
        return None
    rel = os.path.relpath(real, base)
    return None if rel.startswith("..") else "/" + rel


def _hints(root: str, device: str, depth: int) -> list[Hint]:
    if depth <= 0:
        return []
    out: list[Hint] = []
    p = device
    while p.startswith("/sys/devices/"):
        hint = _hint_at(root, p, depth)
        if hint is not None:
            out.append(hint)
            break
        p = os.path.dirname(p)
    base = root.rstrip("/")
    members = sorted(Path(f"{base}{device}").glob("slaves/*"))
    group = _vfio_group(device)
    if group is not None:
        members += sorted(Path(f"{base}/sys/kernel/iommu_groups/{group}/devices").glob("*"))
    for member in members:
        real = _real(root, "/" + os.path.relpath(member, root or "/"))
        if real is not None:
            out += _hints(root, real, depth - 1)
    return out


def _vfio_group(device: str) -> str | None:
    parent, name = os.path.split(device)
    return name if parent == "/sys/devices/virtual/vfio" else None


def _hint_at(root: str, path: str, depth: int) -> Hint | None:
    cpus = next((c for c in (_read(root, path, f) for f in _CPU_FILES) if c), "")
    numa = _read(root, path, "numa_node")
    if numa == "-1":
        numa = ""  # a device (or machine) without NUMA affinity
    sockets = ""
    if numa and not cpus:
        # Firmware that reports the socket as the NUMA node: the parents may know the CPUs.
        parents = _hints(root, os.path.dirname(path), depth - 1)
        cpus = ",".join(sorted({str(h.cpus) for h in parents if h.cpus}))
        numa = ",".join(sorted({str(h.numas) for h in parents if h.numas})) or numa
        if not cpus:
            sockets, numa = numa, ""
    if not (cpus or numa or sockets):
        return None
    try:
        return Hint(path, CpuSet.parse(cpus), CpuSet.parse(numa), CpuSet.parse(sockets))
    except CpuSetError as e:
        log.warning("%s: unreadable topology (%s): no hint", path, e)
        return None


def _read(root: str, path: str, name: str) -> str:
    return read_attr(Path(f"{root.rstrip('/')}{path}/{name}")) or ""
