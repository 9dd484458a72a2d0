"""How a container wants its CPUs: the QoS/annotation table of nri-plugins' topology-aware,
and ``Preferences``, what a container's annotations ask of the policy, decoded once."""

from __future__ import annotations

import fnmatch
import functools
import logging
from collections.abc import Sequence

import attrs

from nri_resmgr.config.models import TopologyAwareSpec
from nri_resmgr.cpus import Priority
from nri_resmgr.cpus.errors import PlacementError
from nri_resmgr.policies.allocations import Kind
from nri_resmgr.policies.annotations import DOMAIN, Annotations, Decoded, parse_bool
from nri_resmgr.policies.requests import QoS, Request
from nri_resmgr.policies.topology_aware.cpuprefs import PREFER, PRIORITY, PRIORITY_NAMES, REQUIRE
from nri_resmgr.shorten import short_repr

__all__ = [
    "NO_PREFERENCES",
    "Preferences",
    "Want",
    "check_required_isolation",
    "plain_guaranteed",
    "preferences_of",
    "wanted",
]

log = logging.getLogger(__name__)

KUBE_SYSTEM = "kube-system"


@attrs.frozen
class Preferences:
    """What a container's pod annotations ask of topology-aware (each key read at its
    narrowest scope, ``annotations.Annotations``), decoded once per container by
    ``preferences_of``; a value that does not parse is logged then and ignored. Texts with a
    grammar of their own (hints, memory types, affinities) are parsed where they are used."""

    cpu_preserve: bool = False
    """``cpu.preserve``: the container keeps the cpuset the runtime gave it."""
    prefer_reserved: bool | None = None
    prefer_shared: bool | None = None
    isolated: bool | None = None
    """The effective isolation annotation's value (of ``require-`` and ``prefer-isolated-cpus``
    the one of narrower scope, ``require`` winning a tie); None when neither is set."""
    require_isolated: bool = False
    """``require-isolated-cpus`` is the effective isolation annotation."""
    cpu_priority: Priority | None = None
    """``prefer-cpu-priority``; None: the config's ``defaultCPUPriority``."""
    unlimited_burstable: str | None = None
    """A topology level, resolved against the pools where it is used."""
    keep_mems: bool = False
    """``memory.preserve`` as ParseBool reads it: cpuset.mems left as the runtime has them."""
    memory_preserve: bool = False
    """``memory.preserve`` as the memory zones read it (``true``, ``1``, ``t``, ``yes``, any
    case): accounted in every node of the pool."""
    memory_type: str | None = None
    strict_hints: bool = False
    pick_by_hints: bool = False
    hint_sources: str | None = None
    """``topologyhints``: a boolean, or which automatic sources (``hint_sources``)."""
    test_hints: str | None = None
    allow_hints: str | None = None
    deny_hints: str | None = None
    affinity: str | None = None
    """``resource-policy.nri.io/affinity``, the pod's (``affinity``)."""
    anti_affinity: str | None = None

    @classmethod
    def decode(cls, a: Annotations) -> Preferences:
        memory_preserve = a.get("memory.preserve")
        return cls(
            cpu_preserve=a.flag("cpu.preserve") is True,
            prefer_reserved=a.flag("prefer-reserved-cpus"),
            prefer_shared=a.flag("prefer-shared-cpus"),
            isolated=_isolation(a),
            require_isolated=_requires_isolation(a),
            cpu_priority=_priority(a),
            unlimited_burstable=a.get("unlimited-burstable"),
            keep_mems=a.flag("memory.preserve") is True,
            memory_preserve=memory_preserve is not None
            and memory_preserve.strip().lower() in ("true", "1", "t", "yes"),
            memory_type=a.get("memory-type"),
            strict_hints=_hint_flag(a, "strict.topologyhints"),
            pick_by_hints=_hint_flag(a, "pick-resources-by-hints"),
            hint_sources=a.get("topologyhints"),
            test_hints=a.get("test.topologyhints"),
            allow_hints=a.get("allow.topologyhints"),
            deny_hints=a.get("deny.topologyhints"),
            affinity=a.pod_keys.get("affinity"),
            anti_affinity=a.pod_keys.get("anti-affinity"),
        )


NO_PREFERENCES = Preferences()
"""A pod without annotations asks for nothing: the defaults, shared."""

preferences_of = Decoded(Preferences.decode, NO_PREFERENCES)
"""``preferences_of(pod, container)``: the container's Preferences, decoded once per event."""


def _requires_isolation(a: Annotations) -> bool:
    require, prefer = a.scope(REQUIRE), a.scope(PREFER)
    return require is not None and (prefer is None or require <= prefer)


def _isolation(a: Annotations) -> bool | None:
    if a.scope(REQUIRE) is None and a.scope(PREFER) is None:
        return None
    return a.flag(REQUIRE if _requires_isolation(a) else PREFER)


def _priority(a: Annotations) -> Priority | None:
    value = a.get(PRIORITY)
    if value is None or value == "default":
        return None
    prio = PRIORITY_NAMES.get(value)
    if prio is None:
        log.warning("%s: ignoring annotation %s.%s: %s is not a CPU priority (high, normal, "
                    "low, none, default)", a.where, PRIORITY, DOMAIN,
                    short_repr(value))  # fmt: skip
    return prio


def _hint_flag(a: Annotations, name: str) -> bool:
    value = a.get(name)
    if value is None:
        return False
    parsed = parse_bool(value)
    if parsed is None:
        log.error("%s/%s: invalid %s.%s annotation %s: not a boolean; taken as false",
                  a.namespace, a.container, name, DOMAIN, short_repr(value))  # fmt: skip
    return parsed is True


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
    prefs: Preferences, namespace: str, req: Request, spec: TopologyAwareSpec, has_reserved: bool
) -> Want:
    """How the container wants its CPUs: its QoS class and request, its preferences, the
    config (nri-plugins cpuAllocationPreferences)."""
    r = req.cpu_request
    if prefs.cpu_preserve:
        return Want(Kind.PRESERVE, request=r)
    prefer_reserved = prefs.prefer_reserved
    reserved_ns = in_reserved_namespace(namespace, spec.reserved_pool_namespaces)
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
            burst_level=prefs.unlimited_burstable,
            prio=default,
        )
    prio = default if prefs.cpu_priority is None else prefs.cpu_priority
    want = attrs.evolve(_guaranteed(prefs, r, spec), prio=prio)
    if not want.exclusive:
        return want
    return attrs.evolve(want, require_isolated=prefs.require_isolated)


def plain_guaranteed(request: int, spec: TopologyAwareSpec) -> Want:
    """The Want of a Guaranteed container asking ``request`` mCPU with no annotations."""
    return _guaranteed(Preferences(), request, spec)


def _guaranteed(prefs: Preferences, r: int, spec: TopologyAwareSpec) -> Want:
    cores, frac = divmod(r, 1000)
    shared_annotation = prefs.prefer_shared
    isolated_annotation = prefs.isolated  # prefer- or require-isolated-cpus
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
