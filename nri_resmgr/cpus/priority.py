"""CPU priorities (high, normal, low) and how a set of CPUs ranks for a preferred one.

Discovery follows nri-plugins ``pkg/cpuallocator`` discoverCpufreqPriority, per package:
with more than one base frequency, CPUs above the lowest are high priority and the rest low;
with more than one energy performance preference (EPP), CPUs below the least performant EPP
are high and the rest low (EPP decides over frequency); efficient cores of a hybrid machine
are always low, and never high or normal while performance cores exist. Everything else is
normal. (Upstream's first source, Intel SST, is read through an ioctl, not sysfs: not here.)
"""

from __future__ import annotations

import enum

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.errors import InvalidValue
from nri_resmgr.sysfs import System
from nri_resmgr.sysfs.cpudetails import CoreKind, Epp

__all__ = ["Priority", "discover_priorities", "rank"]


class Priority(enum.IntEnum):
    HIGH = 0
    NORMAL = 1
    LOW = 2
    NONE = 3
    """No preference: every set ranks the same."""

    @classmethod
    def parse(cls, text: str) -> Priority:
        """An annotation or config value: high, normal, low, none (``default`` is none)."""
        name = text.strip().lower()
        if name == "default":
            return cls.NONE
        try:
            return cls[name.upper()]
        except KeyError:
            problem = f"{text!r} is not a CPU priority (high, normal, low, none)"
            raise InvalidValue(problem) from None


Priorities = tuple[CpuSet, CpuSet, CpuSet]
"""The high, normal and low priority CPUs."""


def discover_priorities(system: System) -> Priorities:
    details = system.details
    efficient = details.core_kinds.get(CoreKind.EFFICIENT, CpuSet())
    found: list[set[int]] = [set(), set(), set()]
    for package in system.packages():
        cpus = list(system.package_cpus(package))
        freqs = sorted({details.base_frequency[c] for c in cpus if c in details.base_frequency})
        epps = sorted(
            {details.epp[c] for c in cpus if details.epp.get(c, Epp.UNKNOWN) < Epp.UNKNOWN}
        )
        for cpu in cpus:
            prio = Priority.NORMAL
            if len(freqs) > 1:
                high = details.base_frequency.get(cpu, 0) > freqs[0]
                prio = Priority.HIGH if high else Priority.LOW
            if cpu in efficient:
                prio = Priority.LOW
            elif len(epps) > 1:
                high = details.epp.get(cpu, Epp.UNKNOWN) < epps[-1]
                prio = Priority.HIGH if high else Priority.LOW
            found[prio].add(cpu)
    return CpuSet(found[0]), CpuSet(found[1]), CpuSet(found[2])


def rank(prios: Priorities, cpus: CpuSet, prefer: Priority, count: int) -> tuple[int, ...]:
    """A sort key, smaller first, ordering CPU sets as upstream's cmpCPUSet compares them.

    For a positive ``count`` a set with at least ``count`` CPUs of the preferred priority
    beats one without, and among such sets the tightest wins (and nothing else counts);
    otherwise more preferred CPUs win, then more CPUs of each lower priority, then fewer of
    each higher one. A high-priority preference falls back to normal CPUs between sets that
    have no high ones at all.
    """
    if prefer is Priority.NONE:
        return ()
    n = [len(cpus & p) for p in prios]
    higher = tuple(n[p] for p in range(int(prefer)))
    if count <= 0:
        return (*(-n[p] for p in range(int(prefer), 3)), *higher)
    head: tuple[int, ...] = ()
    first = int(prefer)
    if prefer is Priority.HIGH:
        # A set with high-priority CPUs beats one without; those compare by normal ones.
        head = (int(n[0] == 0),)
        first = int(Priority.NORMAL) if n[0] == 0 else first
    if n[first] >= count:
        return (*head, 0, n[first])
    return (*head, 1, -n[first], *(-n[p] for p in range(first + 1, 3)), *higher)
