"""Exclusive-CPU annotations beyond the QoS table: ``prefer-cpu-priority`` and
``require-isolated-cpus`` (with its ``prefer-isolated-cpus`` interplay), as nri-plugins'
``pod-preferences.go`` reads them and ``resources.go`` verifyStrictCPUPreferences enforces.

A CPU priority preference weighs in pool choice too (``resources.go`` supply.GetScore,
``pools.go`` compareScores): a pool whose free CPUs of the preferred priority cover the
request beats one whose do not (``priority_capacity``). Upstream counts the performance
cores as the high-priority ones (every CPU on a non-hybrid machine) and, on a hybrid
machine, the efficient cores as the low-priority ones; otherwise the allocator's classes.

Of ``require-isolated-cpus`` and ``prefer-isolated-cpus``, the one of narrower scope
(container before pod) is the effective isolation preference, ``require`` winning a tie
(``preferences.Preferences`` reads both); when ``require`` is the effective one, a
container given exclusive CPUs that are not all isolated fails creation instead of running
on ordinary exclusive CPUs.
"""

from __future__ import annotations

from nri_resmgr.cpus import Priority, topology_of
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.sysfs import System
from nri_resmgr.sysfs.cpudetails import CoreKind

__all__ = [
    "PREFER",
    "PRIORITY",
    "PRIORITY_NAMES",
    "REQUIRE",
    "priority_capacity",
    "scoring_priorities",
]

PREFER = "prefer-isolated-cpus"
REQUIRE = "require-isolated-cpus"
PRIORITY = "prefer-cpu-priority"


PRIORITY_NAMES = {"high": Priority.HIGH, "normal": Priority.NORMAL, "low": Priority.LOW,
                  "none": Priority.NONE}  # fmt: skip
"""Upstream's cpuPrioByName: the annotation's values, matched exactly."""


def scoring_priorities(system: System) -> tuple[CpuSet, CpuSet, CpuSet]:
    """The high, normal and low priority CPUs as upstream's pool scoring counts them: high
    are the performance cores (all CPUs unless hybrid), low the efficient cores (the
    allocator's low ones unless hybrid), normal the allocator's normal ones."""
    topo = topology_of(system)
    _, normal, low = topo.priorities  # high: upstream counts performance cores instead
    if topo.hybrid:
        return topo.kinds[CoreKind.PERFORMANCE], normal, topo.kinds[CoreKind.EFFICIENT]
    return topo.online, normal, low


def priority_capacity(
    system: System, sharable: CpuSet, prefer: Priority, full: int, part: int
) -> int:
    """mCPU of ``prefer``-priority CPUs among ``sharable`` left after a request for ``full``
    exclusive CPUs and ``part`` mCPU shared (negative: too few); 0 without a preference.
    A request for nothing counts as 1 mCPU, as upstream supply.GetScore counts it."""
    if prefer is Priority.NONE:
        return 0
    if full == 0 and part == 0:
        part = 1
    cpus = scoring_priorities(system)[prefer]
    return len(cpus & sharable) * 1000 - (1000 * full + part)
