"""The tight picker: ``count`` CPUs packed into the tightest NUMA node, die or package.

Given the CPUs a caller may take from, pick ``count`` of them so that the result is as tight
as possible: inside one NUMA node if one can hold it, else one die, else one package; and
within that, whole idle cores before lone hyperthreads, so that exclusive users do not share
a core with someone else when they need not.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from nri_resmgr.cpus.errors import AllocationError
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.sysfs import System


def pick_cpus(system: System, available: CpuSet, count: int, lowest: bool = False) -> CpuSet:
    """``count`` CPUs out of ``available``, tightly packed; raise AllocationError if short.

    By default the fullest group that fits is used (best fit, keeping big groups whole);
    ``lowest`` takes the first group in id order instead (how reserved CPUs are laid out).
    """
    if count <= 0:
        return CpuSet()
    if count > len(available):
        raise AllocationError(f"need {count} CPUs, only {len(available)} available ({available})")
    domain = _tightest_domain(system, available, count, lowest)
    return _take_from_domain(system, domain, count)


def release_order(system: System, held: CpuSet, count: int) -> CpuSet:
    """Which ``count`` of ``held`` to give back: lone threads first, then whole cores,
    starting from the least populated NUMA node, so what stays is tight."""
    if count <= 0:
        return CpuSet()
    if count >= len(held):
        return held
    keep = pick_cpus(system, held, len(held) - count)
    return held - keep


def _domains(system: System) -> list[Callable[[int], tuple[int, ...]]]:
    # From the tightest to the loosest grouping of a CPU.
    return [
        lambda c: (system.cpus[c].node,),
        lambda c: (system.cpus[c].package, system.cpus[c].die),
        lambda c: (system.cpus[c].package,),
    ]


def _tightest_domain(system: System, available: CpuSet, count: int, lowest: bool) -> CpuSet:
    for key_of in _domains(system):
        groups: dict[tuple[int, ...], set[int]] = defaultdict(set)
        for cpu in available:
            groups[key_of(cpu)].add(cpu)
        fitting = [CpuSet(g) for g in groups.values() if len(g) >= count]
        if fitting and lowest:
            return min(fitting, key=min)
        if fitting:
            # Best fit: the fullest group that still holds the request keeps big groups whole.
            return min(fitting, key=lambda g: (len(g), -_idle_cores(system, g), min(g)))
    return available


def _idle_cores(system: System, cpus: CpuSet) -> int:
    return sum(
        1
        for c in cpus
        if system.cpus[c].threads.issubset(cpus) and c == min(system.cpus[c].threads)
    )


def _take_from_domain(system: System, domain: CpuSet, count: int) -> CpuSet:
    whole: list[CpuSet] = []
    lone: list[int] = []
    seen: set[int] = set()
    for cpu in domain:
        if cpu in seen:
            continue
        core = system.cpus[cpu].threads & domain
        seen.update(core)
        if core == system.cpus[cpu].threads:
            whole.append(core)
        else:
            lone.extend(core)
    taken: list[int] = []
    # Lone threads first when the request is odd-sized, so a whole core is not split needlessly.
    need_odd = count % max(1, max((len(c) for c in whole), default=1))
    if need_odd and lone:
        use = min(need_odd, len(lone))
        taken.extend(lone[:use])
        lone = lone[use:]
    for core in whole:
        if len(taken) + len(core) > count:
            continue
        taken.extend(core)
    for cpu in lone:
        if len(taken) >= count:
            break
        taken.append(cpu)
    if len(taken) < count:
        # Only split cores are left: take threads in order.
        rest = [c for c in domain if c not in taken]
        taken.extend(rest[: count - len(taken)])
    return CpuSet(taken[:count])
