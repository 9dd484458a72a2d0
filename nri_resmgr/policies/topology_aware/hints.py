"""Topology hints: where a container's devices sit, as nri-plugins' topology-aware policy
uses them (``cmd/plugins/topology-aware/policy/hint.go``, ``node.go`` HintScore, ``pools.go``
combineHintScores, ``resources.go`` verifyStrictTopologyHints and takeCPUsByHints).

A hint names CPUs, NUMA nodes or sockets; ``hint_sources`` gathers a container's (from its
device nodes' sysfs entries and its annotations) once per grant. Pool choice reads one score
per pool (``pool_score``, combined over the hints by ``combine``); with
``strict.topologyhints`` a grant whose CPUs or memory lie outside a hint fails
(``strict_failure``); ``pick-resources-by-hints`` takes exclusive CPUs per pod-resource-API
hint (``take_cpus``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import attrs

from nri_resmgr.cpus import Priority, allocate_cpus
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.topology_aware.pools import Pool
from nri_resmgr.sysfs import System

__all__ = [
    "ContainerHints",
    "Granted",
    "Hint",
    "HintTarget",
    "combine",
    "hint_targets",
    "misaligned",
    "misaligned_mems",
    "pool_score",
    "strict_failure",
    "take_cpus",
]

log = logging.getLogger(__name__)

POD_RESOURCE_PROVIDER = "podresourceapi:"
"""Provider prefix of hints from kubelet's pod resources API (the ones picked by)."""
OVERFIT = 0.9
"""nri-plugins OverfitPenalty: a pool wider than the hint scores this much less per level."""


@attrs.frozen
class Hint:
    """One provider's hint; an empty set means the field was not given."""

    provider: str
    cpus: CpuSet = attrs.field(factory=CpuSet)
    numas: CpuSet = attrs.field(factory=CpuSet)
    sockets: CpuSet = attrs.field(factory=CpuSet)

    def __str__(self) -> str:
        fields = (("CPUs", self.cpus), ("NUMAs", self.numas), ("sockets", self.sockets))
        parts = [f"{k}:{v}" for k, v in fields if v]
        return f"<hints {', '.join(parts)} (from {self.provider})>"


@attrs.frozen
class ContainerHints:
    """What pool choice and the grant read of a container's hints."""

    hints: tuple[Hint, ...]
    strict: bool = False
    """``strict.topologyhints``: a grant outside a hint fails."""
    pick: bool = False
    """``pick-resources-by-hints``: exclusive CPUs taken per pod-resource-API hint."""


@attrs.frozen
class HintTarget:
    """What a pool is, for scoring a hint against it (nri-plugins' node kinds)."""

    level: str
    cpus: CpuSet
    """CPUs a CPU hint is matched against (upstream's choice per node kind)."""
    nodes: CpuSet
    """NUMA nodes a NUMA hint is matched against."""
    package: int
    divisor: int = 1
    """A socket hint on a pool below the socket scores 1/divisor (its share of the socket)."""
    parent: int | None = None


# -- scoring --------------------------------------------------------------------------------


def hint_targets(system: System, pools: Sequence[Pool]) -> list[HintTarget]:
    """Per pool, what upstream's node of that kind matches hints against: a NUMA node its
    own CPUs and id; a die, socket or the root the whole package's (all) CPUs."""
    out = []
    for p in pools:
        package = system.cpus[min(p.cpus)].package if p.cpus else -1
        package_cpus = system.package_cpus(package)
        nodes = CpuSet(system.nodes_of(p.cpus))
        if p.level == "numa":
            cpus = CpuSet.union_all(system.nodes[n].cpus for n in nodes) if nodes else p.cpus
            divisor = len(system.nodes_of(package_cpus))
        elif p.level in ("die", "package"):
            # Upstream's die node matches CPU hints against its whole package too.
            cpus, divisor = package_cpus, len(nodes)
            if p.level == "package":
                nodes, divisor = CpuSet(system.nodes_of(package_cpus)), 1
        elif p.level == "l3cache":
            cpus, divisor = p.cpus, 1
        else:
            cpus, divisor = system.online, 1
        out.append(HintTarget(p.level, cpus, nodes, package, max(divisor, 1), p.parent))
    return out


def pool_score(targets: Sequence[HintTarget], pool: int, hint: Hint) -> float:
    """How well pool ``pool`` matches ``hint``, 0..1 (nri-plugins node.go HintScore)."""
    t = targets[pool]
    if hint.cpus:
        return len(hint.cpus & t.cpus) / len(hint.cpus)
    if hint.numas:
        if t.level == "system":
            return OVERFIT * OVERFIT
        hit = 1.0 if not hint.numas.isdisjoint(t.nodes) else 0.0
        return hit if t.level == "numa" else OVERFIT * hit
    if hint.sockets:
        if t.level == "system":
            return OVERFIT
        if t.level == "l3cache":
            return OVERFIT * pool_score(targets, t.parent, hint) if t.parent is not None else 0.0
        return (1.0 if t.package in hint.sockets else 0.0) / t.divisor
    return 0.0


def combine(scores: Iterable[float]) -> tuple[float, float]:
    """nri-plugins combineHintScores: the product of all scores, and of the non-zero ones."""
    combined, filtered = 1.0, 0.0
    for s in scores:
        combined *= s
        if s != 0.0:
            filtered = s if filtered == 0.0 else filtered * s
    return combined, filtered


# -- the grant ------------------------------------------------------------------------------


def misaligned(hint: Hint, system: System, cpus: CpuSet) -> CpuSet:
    """Of ``cpus`` (or memory nodes, with ``mems``), those outside the hint's CPUs or its
    NUMA nodes' CPUs (nri-plugins pkg/utils/topology MisalignedCPUSet)."""
    out = CpuSet()
    if hint.cpus:
        out = out | (cpus - hint.cpus)
    numa_cpus = CpuSet.union_all(system.nodes[n].cpus for n in hint.numas if n in system.nodes)
    if numa_cpus:
        out = out | (cpus - numa_cpus)
    return out


def misaligned_mems(hint: Hint, system: System, mems: CpuSet) -> CpuSet:
    """Memory nodes of ``mems`` outside the nodes of the hint's CPUs, or its NUMA nodes."""
    out = CpuSet()
    if hint.cpus:
        out = out | (mems - CpuSet(system.nodes_of(hint.cpus)))
    if hint.numas:
        out = out | (mems - hint.numas)
    return out


def take_cpus(
    system: System, free: CpuSet, hints: ContainerHints, count: int, prio: Priority
) -> CpuSet:
    """nri-plugins takeCPUsByHints: ``count`` exclusive CPUs of ``free``, an equal share from
    each pod-resource-API hint's CPUs (one each unless they divide ``count``), the rest
    anywhere; the plain pick when there are no such hints, more of them than CPUs, or a
    hint's CPUs run out."""
    picked = [h for h in hints.hints if h.provider.startswith(POD_RESOURCE_PROVIDER)]
    if not picked or len(picked) > count:
        return allocate_cpus(system, free, count, prio)
    per = count // len(picked) if len(picked) < count and count % len(picked) == 0 else 1
    left, out, total = free, CpuSet(), count
    for h in picked:
        there = left & h.cpus
        if len(there) < per:
            log.error("failed to allocate CPUs by topology hints: %d CPUs wanted from %s, "
                      "%s free there", per, h, there or "none")  # fmt: skip
            return allocate_cpus(system, free, count, prio)
        got = allocate_cpus(system, there, per, prio)
        out, left, total = out | got, left - got, total - per
    if total > 0:
        out = out | allocate_cpus(system, left, total, prio)
    return out


@attrs.frozen
class Granted:
    """What strict hints are checked against: the CPU sets of a grant (empty: none of that
    kind) and its memory nodes."""

    shared: CpuSet = attrs.field(factory=CpuSet)
    reserved: CpuSet = attrs.field(factory=CpuSet)
    exclusive: CpuSet = attrs.field(factory=CpuSet)
    mems: CpuSet = attrs.field(factory=CpuSet)


def strict_failure(hints: ContainerHints, system: System, granted: Granted) -> str | None:
    """Why a grant fails the container's strict hints (nri-plugins
    verifyStrictTopologyHints, in its order), or None when it does not (or they are not
    strict). Unlike upstream, which checks the memory zone before it is set, the memory
    nodes the container was given are checked too."""
    if not hints.strict:
        return None
    for hint in hints.hints:
        for what, cpus in (("shared", granted.shared), ("reserved", granted.reserved),
                           ("exclusive", granted.exclusive)):  # fmt: skip
            bad = misaligned(hint, system, cpus) if cpus else CpuSet()
            if bad:
                return f'granted {what} CPUs "{bad}" fail strict hint {hint}'
        bad = misaligned_mems(hint, system, granted.mems)
        if bad:
            return f"granted memory zones {bad} fail strict hint {hint}"
    return None
