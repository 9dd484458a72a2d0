"""How a container wants its CPUs: the QoS/annotation table of nri-plugins' topology-aware."""

from __future__ import annotations

import fnmatch
import functools
from collections.abc import Sequence

import attrs

from nri_resmgr.config.models import TopologyAwareSpec
from nri_resmgr.cpus import Priority
from nri_resmgr.cpus.errors import PlacementError
from nri_resmgr.policies.allocations import Kind
from nri_resmgr.policies.annotations import lookup, lookup_bool
from nri_resmgr.policies.requests import QoS, Request
from nri_resmgr.policies.topology_aware.cpuprefs import REQUIRE, cpu_priority, isolation
from nri_resmgr.resmgr.model import Container, Pod

KUBE_SYSTEM = "kube-system"


@attrs.frozen
class Want:
    kind: Kind
    exclusive: int = 0
    """Number of exclusive CPUs."""
    request: int = 0
    """mCPU, the whole request."""
    isolated: bool = False
    unlimited: bool = False
    """A burstable container without a CPU limit (placed at the unlimitedBurstable level)."""
    limit: int | None = None
    """mCPU CPU limit of a limited Burstable container (pools covering it are preferred)."""
    burst_level: str | None = None
    """The unlimited-burstable annotation (a topology level), unresolved; None: the config's."""
    prio: Priority = Priority.NONE
    """Preferred CPU priority: of exclusive CPUs, and of the pool (``prefer-cpu-priority``
    for Guaranteed containers, else the config's ``defaultCPUPriority``)."""
    require_isolated: bool = False
    """``require-isolated-cpus`` is the effective isolation annotation: fail without them."""

    @property
    def shared_part(self) -> int:
        """mCPU taken from a pool's shared CPUs (the fraction of a mixed request)."""
        return self.request % 1000 if self.kind is Kind.MIXED else self.request


def in_reserved_namespace(namespace: str, extra: Sequence[str]) -> bool:
    if namespace == KUBE_SYSTEM:
        return True
    return bool(extra) and any(fnmatch.fnmatchcase(namespace, g) for g in extra)


@functools.lru_cache(maxsize=8)
def _parsed_priority(text: str) -> Priority:
    """The configured default priority (validated at load), parsed once, not per create."""
    return Priority.parse(text)


@functools.lru_cache(maxsize=8)
def _besteffort(default_priority: str) -> Want:
    """The one Want of every BestEffort container (a frozen value: shared, not rebuilt), by
    the configured default priority's text (a str hashes in C, a Priority in Python)."""
    return Want(Kind.SHARED, request=0, prio=_parsed_priority(default_priority))


def wanted(
    pod: Pod, container: Container, req: Request, spec: TopologyAwareSpec, has_reserved: bool
) -> Want:
    r = req.cpu_request
    annotated = bool(pod.annotations)  # most pods have none: no preference to look up
    if annotated and lookup_bool(pod, container, "cpu.preserve"):
        return Want(Kind.PRESERVE, request=r)
    prefer_reserved = lookup_bool(pod, container, "prefer-reserved-cpus") if annotated else None
    reserved_ns = in_reserved_namespace(pod.namespace, spec.reserved_pool_namespaces)
    if has_reserved and (prefer_reserved or (reserved_ns and prefer_reserved is not False)):
        return Want(Kind.RESERVED, request=r)
    if req.qos is QoS.BESTEFFORT:
        return _besteffort(spec.default_cpu_priority)
    # nri-plugins cpuAllocationPreferences: only Guaranteed containers' annotation counts.
    default = _parsed_priority(spec.default_cpu_priority)
    if req.qos is QoS.BURSTABLE:
        return Want(
            Kind.SHARED,
            request=r,
            unlimited=req.cpu_limit is None,
            limit=req.cpu_limit,
            burst_level=lookup(pod, container, "unlimited-burstable"),
            prio=default,
        )
    want = attrs.evolve(
        _guaranteed(pod, container, r, spec), prio=cpu_priority(pod, container, default)
    )
    if not want.exclusive:
        return want
    return attrs.evolve(want, require_isolated=isolation(pod, container).strict)


def _guaranteed(pod: Pod, container: Container, r: int, spec: TopologyAwareSpec) -> Want:
    cores, frac = divmod(r, 1000)
    shared_annotation = lookup_bool(pod, container, "prefer-shared-cpus")
    isolated_annotation = isolation(pod, container).value  # prefer- or require-isolated-cpus
    prefer_shared = spec.prefer_shared_cpus if shared_annotation is None else shared_annotation
    prefer_isolated = (
        spec.prefer_isolated_cpus if isolated_annotation is None else isolated_annotation
    )
    shared = Want(Kind.SHARED, request=r)
    if cores == 0:
        return shared
    mixed_or_exclusive = Kind.MIXED if frac else Kind.EXCLUSIVE
    if r < 2000:
        if prefer_shared:
            return shared
        return Want(mixed_or_exclusive, cores, r, isolated=prefer_isolated)
    if frac:
        if shared_annotation is False:
            return Want(Kind.MIXED, cores, r, isolated=prefer_isolated)
        return shared
    if prefer_shared:
        return shared
    # Multi-CPU exclusive requests go isolated only when annotated so, not by config default.
    return Want(Kind.EXCLUSIVE, cores, r, isolated=isolated_annotation is True)


def check_required_isolation(want: Want, isolated: bool, name: str) -> None:
    """Raise PlacementError if ``want`` requires isolated CPUs and its grant has none."""
    if want.require_isolated and want.isolated and want.exclusive >= 1 and not isolated:
        raise PlacementError(
            f"{name}: {REQUIRE}: granted isolated CPUs fewer than the {want.exclusive} requested"
        )
