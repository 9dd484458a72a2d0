"""What the balloons policy checks and completes in a configuration as it loads it."""

from __future__ import annotations

import attrs

from nri_resmgr.config.models import BalloonsSpec, BalloonType
from nri_resmgr.config.notapplied import in_use, say_once
from nri_resmgr.config.values import CpuList, CpusExcept
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.errors import ConfigError
from nri_resmgr.policies.balloons.keys import CLASS_NOT_APPLIED
from nri_resmgr.policies.balloons.types import RESERVED
from nri_resmgr.sysfs import MemoryType


def reserved_type(
    spec: BalloonsSpec, types: list[BalloonType], reserved: CpuSet
) -> tuple[list[BalloonType], CpuSet]:
    """The reserved type as upstream completes it. A reserved cpuset is the reserved
    balloon's start (and its minCPUs unless set); a quantity is only its minCPUs, the
    CPUs are chosen like any balloon's (then no CPU is reserved as such)."""
    cpu = spec.reserved_resources.cpu
    is_set = isinstance(cpu, CpuList | CpusExcept)
    out = []
    for t in types:
        if t.name == RESERVED:
            if is_set:
                t = attrs.evolve(
                    t, allocator_priority="normal", min_cpus=t.min_cpus or len(reserved)
                )
            elif t.min_cpus and t.min_cpus != len(reserved):
                raise ConfigError(
                    f"spec.balloonTypes: reserved minCPUs {t.min_cpus} does not match "
                    f"reservedResources.cpu {cpu.text if cpu else ''!r}"
                )
            else:
                t = attrs.evolve(t, min_cpus=len(reserved))
        out.append(t)
    return out, (reserved if is_set else CpuSet())


def check_memory_types(spec: BalloonsSpec) -> None:
    for i, t in enumerate(spec.balloon_types):
        try:
            if t.memory_types:
                MemoryType.parse(",".join(t.memory_types))
        except ValueError as e:
            raise ConfigError(f"spec.balloonTypes[{i}].memoryTypes: {e}") from e


def report_class_keys(spec: BalloonsSpec) -> None:
    """The CPU class keys the control step does not write, said once each when a class sets one."""
    paths = [f"spec.{k}" for k in CLASS_NOT_APPLIED]
    for c in spec.control.cpu.classes.values():
        for path in in_use(c, paths):
            say_once(f"spec.control.cpu.classes.<name>.{path.removeprefix('spec.')}")


__all__ = ["check_memory_types", "report_class_keys", "reserved_type"]
