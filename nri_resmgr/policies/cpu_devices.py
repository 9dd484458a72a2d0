"""One DRA device per allocatable CPU, with the attributes claims select and constrain on.

Names are ``cpu<N>`` (N the Linux CPU id), stable across restarts and reconfigurations.
Attribute names follow kubernetes-sigs/dra-driver-cpu where it has them (``cpuID``,
``coreID``, ``socketID``, ``cacheL3ID``, ``coreType``, ``smtEnabled``), so its claims carry
over; ``numaNode``, ``dieID`` and ``isolated`` are ours; ``resource.kubernetes.io/numaNode``
is the qualified NUMA name dra-driver-cpu publishes as standard. Unqualified names are filed
under the driver name by the API (``device.attributes["topology-aware.nri.io"].numaNode``).

Order is the scheduler's preference (it takes the first free devices that fit): by NUMA
node, then core, SMT siblings adjacent, so ``count: 2`` lands on one core when it can.
"""

from __future__ import annotations

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.resmgr.model import GROUP_CAPACITY, AttributeValue, Device
from nri_resmgr.sysfs import System
from nri_resmgr.sysfs.caches import has_level, shared_caches

STANDARD_NUMA = "resource.kubernetes.io/numaNode"
CORE_TYPE = "standard"
"""sysfs as read here tells no hybrid core types apart; every core is published as standard."""


def device_name(cpu: int) -> str:
    return f"cpu{cpu}"


def cpu_devices(system: System, offered: CpuSet) -> list[Device]:
    """The devices for the CPUs in ``offered`` (allowed minus reserved)."""
    l3 = shared_l3(system)
    smt = any(len(c.threads) > 1 for c in system.cpus.values())
    ordered = sorted(
        (system.cpus[i] for i in offered if i in system.cpus),
        key=lambda c: (c.node, c.package, c.die, min(c.threads), c.id),
    )
    devices = []
    for cpu in ordered:
        attributes: dict[str, AttributeValue] = {
            "cpuID": cpu.id,
            "coreID": min(cpu.threads),
            "socketID": cpu.package,
            "dieID": cpu.die,
            "numaNode": cpu.node,
            STANDARD_NUMA: cpu.node,
            "coreType": CORE_TYPE,
            "isolated": cpu.id in system.isolated,
            "smtEnabled": smt,
        }
        if cpu.id in l3:
            attributes["cacheL3ID"] = l3[cpu.id]
        devices.append(Device(device_name(cpu.id), attributes, cpus=(cpu.id,)))
    return devices


def shared_l3(system: System) -> dict[int, int]:
    """CPU -> the lowest CPU id sharing its L3 cache; empty when sysfs shows no L3 at all
    (``shared_caches`` would fall back to the core's threads, which is no L3)."""
    if not has_level(system, 3):
        return {}
    return {cpu: min(shared) for cpu, shared in shared_caches(system, 3).items()}


def group_devices(system: System, grouped: CpuSet, by: str) -> list[Device]:
    """One shared device per NUMA node (``by`` ``numanode``) or socket (``socket``) holding
    CPUs of ``grouped``, named ``numa<N>`` / ``socket<N>``, with capacity ``cpu`` = its CPUs
    in ``grouped``. Attributes as dra-driver-cpu's grouped devices (``numaNodeID`` or
    ``socketID``, ``numCPUs``, ``smtEnabled``) plus ours (``numaNode`` and the standard
    ``resource.kubernetes.io/numaNode`` for a NUMA group)."""
    smt = any(len(c.threads) > 1 for c in system.cpus.values())
    groups: dict[int, list[int]] = {}
    for cpu in sorted(grouped):
        if cpu in system.cpus:
            info = system.cpus[cpu]
            groups.setdefault(info.node if by == "numanode" else info.package, []).append(cpu)
    devices = []
    for gid, cpus in sorted(groups.items()):
        attributes: dict[str, AttributeValue] = {"numCPUs": len(cpus), "smtEnabled": smt}
        if by == "numanode":
            attributes |= {"numaNodeID": gid, "numaNode": gid, STANDARD_NUMA: gid,
                           "socketID": system.cpus[cpus[0]].package}  # fmt: skip
            name = f"numa{gid}"
        else:
            attributes["socketID"] = gid
            name = f"socket{gid}"
        devices.append(
            Device(name, attributes, {GROUP_CAPACITY: len(cpus)}, tuple(cpus), shared=True)
        )
    return devices
