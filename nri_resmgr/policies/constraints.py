"""``availableResources`` / ``reservedResources`` resolved against the hardware."""

from __future__ import annotations

import math

from nri_resmgr.config.models import Constraints
from nri_resmgr.cpus import Priority, allocate_cpus
from nri_resmgr.cpus.tight import pick_cpus
from nri_resmgr.cpuset import CpuSet, CpuSetError
from nri_resmgr.errors import ConfigError
from nri_resmgr.quantity import QuantityError, cpu_milli
from nri_resmgr.sysfs import System

AVAILABLE = "spec.availableResources.cpu"
RESERVED = "spec.reservedResources.cpu"


def parse_milli_cpu(text: str, path: str) -> int:
    """A Kubernetes CPU quantity ("750m", "2", "1.5") in mCPU, rounded up as kubelet does."""
    try:
        return cpu_milli(text)
    except QuantityError as e:
        raise ConfigError(
            f"{path}: {text!r} is not a CPU quantity, cpuset: or exclude-cpuset: ({e})"
        ) from e


def _cpuset_value(text: str, prefix: str, path: str) -> CpuSet:
    try:
        return CpuSet.parse(text[len(prefix) :])
    except CpuSetError as e:
        raise ConfigError(f"{path}: {e}") from e


def allowed_cpus(system: System, available: Constraints) -> CpuSet:
    """The CPUs the policy may use: availableResources (or all) ∩ online."""
    text = (available.cpu or "").strip()
    online = system.online
    if not text:
        return online
    if text.startswith("cpuset:"):
        allowed = _cpuset_value(text, "cpuset:", AVAILABLE) & online
    elif text.startswith("exclude-cpuset:"):
        allowed = online - _cpuset_value(text, "exclude-cpuset:", AVAILABLE)
    else:
        raise ConfigError(
            f"{AVAILABLE}: {text!r}: a CPU quantity is not supported here; "
            "use cpuset:<list> or exclude-cpuset:<list>"
        )
    if not allowed:
        raise ConfigError(f"{AVAILABLE}: {text!r} leaves no online CPUs (online: {online})")
    return allowed


def reserved_cpus(
    system: System, reserved: Constraints, allowed: CpuSet, by_allocator: bool = False
) -> CpuSet:
    """The reserved CPUs: a cpuset inside ``allowed``, or a quantity picked from it.

    ``by_allocator``: a quantity is picked as topology-aware upstream picks it, by the CPU
    allocator preferring normal-priority CPUs; otherwise (balloons, whose reserved balloon
    then grows by its own CPU tree) the tightest group in CPU id order."""
    text = (reserved.cpu or "").strip()
    if not text:
        raise ConfigError(f"{RESERVED}: required (a quantity such as 750m, or cpuset:<list>)")
    isolated = system.isolated & allowed
    if text.startswith("cpuset:"):
        cpus = _cpuset_value(text, "cpuset:", RESERVED)
        if not cpus:
            raise ConfigError(f"{RESERVED}: {text!r} is an empty cpuset")
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
    if text.startswith("exclude-cpuset:"):
        cpus = allowed - _cpuset_value(text, "exclude-cpuset:", RESERVED)
        if not cpus:
            raise ConfigError(f"{RESERVED}: {text!r} leaves no CPUs to reserve")
        return cpus
    milli = parse_milli_cpu(text, RESERVED)
    count = math.ceil(milli / 1000)
    if count < 1:
        raise ConfigError(f"{RESERVED}: {text!r} reserves no CPU")
    candidates = allowed - isolated
    if count > len(candidates):
        raise ConfigError(
            f"{RESERVED}: {text!r} needs {count} CPUs but only {len(candidates)} "
            f"non-isolated CPUs are available ({candidates})"
        )
    if by_allocator:
        return allocate_cpus(system, candidates, count, Priority.NORMAL)
    return pick_cpus(system, candidates, count, lowest=True)
