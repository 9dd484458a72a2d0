"""``availableResources`` / ``reservedResources`` resolved against the hardware.

The loader has typed both values (``config/values.py``): here they meet the machine's CPUs.
"""

from __future__ import annotations

import math

from nri_resmgr.config.models import Constraints
from nri_resmgr.config.values import CpuAmount, CpuList, CpusExcept
from nri_resmgr.cpus import Priority, allocate_cpus
from nri_resmgr.cpus.tight import pick_cpus
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.errors import ConfigError
from nri_resmgr.sysfs import System

AVAILABLE = "spec.availableResources.cpu"
RESERVED = "spec.reservedResources.cpu"


def allowed_cpus(system: System, available: Constraints) -> CpuSet:
    """The CPUs the policy may use: availableResources (or all) ∩ online."""
    cpu, online = available.cpu, system.online
    match cpu:
        case None:
            return online
        case CpuList(cpus=cpus):
            allowed = cpus & online
        case CpusExcept(cpus=cpus):
            allowed = online - cpus
        case CpuAmount():
            raise ConfigError(
                f"{AVAILABLE}: {cpu.text!r}: a CPU quantity is not supported here; "
                "use cpuset:<list> or exclude-cpuset:<list>"
            )
    if not allowed:
        raise ConfigError(f"{AVAILABLE}: {cpu.text!r} leaves no online CPUs (online: {online})")
    return allowed


def reserved_cpus(
    system: System, reserved: Constraints, allowed: CpuSet, by_allocator: bool = False
) -> CpuSet:
    """The reserved CPUs: a cpuset inside ``allowed``, or a quantity picked from it.

    ``by_allocator``: a quantity is picked as topology-aware upstream picks it, by the CPU
    allocator preferring normal-priority CPUs; otherwise (balloons, whose reserved balloon
    then grows by its own CPU tree) the tightest group in CPU id order."""
    cpu = reserved.cpu
    isolated = system.isolated & allowed
    match cpu:
        case None:
            raise ConfigError(f"{RESERVED}: required (a quantity such as 750m, or cpuset:<list>)")
        case CpuList():
            return _reserved_list(cpu, allowed, isolated)
        case CpusExcept(cpus=cpus):
            cpus = allowed - cpus
            if not cpus:
                raise ConfigError(f"{RESERVED}: {cpu.text!r} leaves no CPUs to reserve")
            return cpus
        case CpuAmount():
            return _reserved_amount(system, cpu, allowed - isolated, by_allocator)


def _reserved_list(cpu: CpuList, allowed: CpuSet, isolated: CpuSet) -> CpuSet:
    cpus = cpu.cpus
    if not cpus:
        raise ConfigError(f"{RESERVED}: {cpu.text!r} is an empty cpuset")
    if not cpus.issubset(allowed):
        raise ConfigError(
            f"{RESERVED}: reserved CPUs {cpus} are not within the available CPUs {allowed}"
        )
    if (cpus & isolated) and (len(cpus) != 1):
        raise ConfigError(
            f"{RESERVED}: reserved CPUs {cpus} mix isolated CPUs ({cpus & isolated}) "
            "with others; an isolated reserved set must be exactly one CPU"
        )
    return cpus


def _reserved_amount(
    system: System, cpu: CpuAmount, candidates: CpuSet, by_allocator: bool
) -> CpuSet:
    count = math.ceil(cpu.milli / 1000)
    if count < 1:
        raise ConfigError(f"{RESERVED}: {cpu.text!r} reserves no CPU")
    if count > len(candidates):
        raise ConfigError(
            f"{RESERVED}: {cpu.text!r} needs {count} CPUs but only {len(candidates)} "
            f"non-isolated CPUs are available ({candidates})"
        )
    if by_allocator:
        return allocate_cpus(system, candidates, count, Priority.NORMAL)
    return pick_cpus(system, candidates, count, lowest=True)
