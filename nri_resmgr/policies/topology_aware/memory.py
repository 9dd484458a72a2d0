"""Memory-aware placement: memory types per pool and what a container asks of memory. The
zones and offers are in ``memzones``, the memory criterion of pool scoring in ``scoring``."""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable

import attrs

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.oomscore import memory_request
from nri_resmgr.policies.requests import QoS, Request, container_request
from nri_resmgr.policies.topology_aware.preferences import preferences_of
from nri_resmgr.resmgr.model import Container, Pod
from nri_resmgr.shorten import shorten
from nri_resmgr.sysfs import MemoryType, System

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_TYPES", "MemoryWant", "attached_memory", "memory_want"]

ANNOTATION = "memory-type"
DEFAULT_TYPES = MemoryType.DRAM | MemoryType.PMEM
"""nri-plugins' default for a container without a memory-type annotation (HBM on request)."""

# libmem's request priorities: lower ones are moved first when a zone is overcommitted.
BESTEFFORT, BURSTABLE, GUARANTEED, PRESERVED = range(4)


def attached_memory(system: System, cpu_nodes: Iterable[int]) -> CpuSet:
    """CPU-less memory nodes (HBM, PMEM) belonging to ``cpu_nodes``: those whose closest DRAM
    nodes with CPUs include one of them (nri-plugins' getClosestSpecialMem)."""
    own = set(cpu_nodes)
    return CpuSet(
        n.id
        for n in system.nodes.values()
        if not n.cpus and n.memory > 0 and own & set(system.attached_cpu_nodes(n.id))
    )


@attrs.frozen
class MemoryWant:
    """What a container asks of memory."""

    request: int = 0
    """Bytes; the memory request (Guaranteed: its limit; Burstable: estimated from its
    oom_score_adj, 0 when unknown; BestEffort: 0)."""
    limit: int = 0
    """Bytes; 0 is unlimited."""
    types: MemoryType = DEFAULT_TYPES
    priority: int = GUARANTEED
    preserve: bool = False
    """memory.preserve: accounted in every node of the pool, cpuset.mems left alone."""
    container_id: str = ""

    @property
    def amount(self) -> int:
        return self.request or self.limit


def memory_want(
    pod: Pod,
    container: Container,
    available: MemoryType,
    capacity: int = 0,
    req: Request | None = None,
) -> MemoryWant:
    """The container's memory request: as nri-plugins' estimateResourceRequirements (the
    limit when Guaranteed, else the request kubelet's oom_score_adj encodes against the node's
    ``capacity`` bytes), the annotated types (or the default) limited to those it has.
    ``req``: the container's ``container_request``, when the caller has it already."""
    if req is None:
        req = container_request(pod, container)
    limit = req.memory_limit or 0
    if req.qos is QoS.GUARANTEED:
        request, priority = limit, GUARANTEED
    elif req.qos is QoS.BURSTABLE:
        request, priority = memory_request(container.oom_score_adj, limit, capacity), BURSTABLE
    else:
        request, priority = 0, BESTEFFORT
    prefs = preferences_of(pod, container)
    if prefs.memory_preserve:
        return MemoryWant(request, limit, available, PRESERVED, True, container.id)
    named = _annotated_types(prefs.memory_type, pod) if prefs.memory_type else DEFAULT_TYPES
    types = _limited(named, available)
    if types is None:
        log.warning(
            "%s/%s/%s: no memory of the wanted types on this machine; using %s",
            pod.namespace,
            pod.name,
            container.name,
            available.label(),
        )
        types = available
    return MemoryWant(request, limit, types, priority, container_id=container.id)


def _annotated_types(value: str, pod: Pod) -> MemoryType:
    """The memory-type annotation's types; the default for a blank or bad one."""
    if value.strip():
        try:
            return MemoryType.parse(value)
        except ValueError as e:
            log.error("%s/%s: ignoring annotation %s: %s", pod.namespace, pod.name, ANNOTATION,
                      shorten(str(e)))  # fmt: skip
    return DEFAULT_TYPES


@functools.lru_cache(maxsize=64)
def _limited(types: MemoryType, available: MemoryType) -> MemoryType | None:
    """``types & available``, None when empty; kept: the same few pairs on every create (a
    Flag's ``&`` and truth value are Python calls)."""
    return (types & available) or None
