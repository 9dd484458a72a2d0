"""Topology hints: where a container's devices sit, as nri-plugins' topology-aware policy
reads and uses them (``pkg/resmgr/cache/container.go`` generateTopologyHints,
``pkg/topology``, ``cmd/plugins/topology-aware/policy/hint.go``, ``node.go`` HintScore,
``resources.go`` verifyStrictTopologyHints and takeCPUsByHints).

A hint names CPUs, NUMA nodes or sockets. Each container's hints are gathered once per
grant (``container_hints``), NUMA-only hints resolved to the nodes' CPUs; pool choice then
reads one score per pool (``pool_score``, a product over the hints) and, with
``strict.topologyhints``, a grant whose CPUs or memory lie outside a hint fails
(``misaligned``). ``pick-resources-by-hints`` takes exclusive CPUs per pod-resource-API hint
(``take_cpus``).

Sources, and what is used here:

- ``test.topologyhints`` (``{name: {CPUs|NUMAs|Sockets|Provider: "..."}}``): honoured when
  ``ENABLE_TEST_APIS`` is set in the daemon's environment, as upstream (whose chart always
  sets it); otherwise said once to be accepted, not applied.
- ``topologyhints``: ``false``/``none`` turns every hint off (test hints too, as upstream);
  a list (``mounts,devices,pod-resources,all``) selects the automatic sources.
- ``allow.topologyhints``/``deny.topologyhints`` (``{type: prefix|glob, paths: [...]}``):
  filter hints by provider path, deny first, an allow match overriding it.
- Automatic hints from mounts' and devices' sysfs entries and from kubelet's pod resources
  API are not generated: the runtime model carries no mounts or devices and there is no
  pod-resources client. Said once when a container asks for them explicitly.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
import yaml

from nri_resmgr.config.notapplied import say_once
from nri_resmgr.resmgr.annotations import DOMAIN, lookup, parse_bool
from nri_resmgr.resmgr.cpuallocator import Priority, allocate_cpus
from nri_resmgr.resmgr.cpuset import CpuSet, CpuSetError
from nri_resmgr.resmgr.model import Container, Pod
from nri_resmgr.resmgr.policies.topology_aware.pools import Pool
from nri_resmgr.sysfs import System

__all__ = [
    "ContainerHints",
    "Granted",
    "Hint",
    "HintTarget",
    "combine",
    "container_hints",
    "hint_targets",
    "misaligned",
    "pool_score",
    "strict_failure",
    "take_cpus",
]

log = logging.getLogger(__name__)

HINTS = "topologyhints"
TEST = f"test.{HINTS}"
STRICT = f"strict.{HINTS}"
PICK = "pick-resources-by-hints"
TEST_APIS_ENV = "ENABLE_TEST_APIS"
"""nri-plugins' pkg/utils EnvVarEnableTestAPIs: test hints only when set (non-empty)."""
POD_RESOURCE_PROVIDER = "podresourceapi:"
"""Provider prefix of hints from kubelet's pod resources API (the ones picked by)."""
OVERFIT = 0.9
"""nri-plugins OverfitPenalty: a pool wider than the hint scores this much less per level."""
_SOURCES = ("mounts", "devices", "pod-resources", "all", "none")
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml when present: the pure-Python loader takes ~1 ms per hint annotation."""


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


# -- gathering ------------------------------------------------------------------------------


def container_hints(pod: Pod, container: Container, system: System) -> ContainerHints | None:
    """The container's hints, NUMA-only ones resolved to CPUs; None when it has none. Every
    hint annotation is read whenever the pod has annotations, as upstream reads them."""
    if not pod.annotations:
        return None  # the common case: no lookups at all
    strict = _bool(pod, container, STRICT)
    pick = _bool(pod, container, PICK)
    hints = _gather(pod, container)
    if not hints:
        return None
    if pick:
        # nri-plugins getMemOfferByHints: the memory zone of the pod-resource hints.
        say_once(f"{PICK}.{DOMAIN} (memory zone by hints)")
    return ContainerHints(tuple(_resolve(h, system) for h in hints), strict, pick)


def _bool(pod: Pod, container: Container, name: str) -> bool:
    value = lookup(pod, container, name)
    if value is None:
        return False
    parsed = parse_bool(value)
    if parsed is None:
        log.error("%s/%s: invalid %s.%s annotation %r: not a boolean; taken as false",
                  pod.namespace, container.name, name, DOMAIN, value)  # fmt: skip
    return parsed is True


def _gather(pod: Pod, container: Container) -> list[Hint]:
    where = f"{pod.namespace}/{pod.name}/{container.name}"
    sources = _sources(lookup(pod, container, HINTS), where)
    if sources is None:
        return []
    if sources and lookup(pod, container, HINTS) is not None:
        # Asked for explicitly: say that the automatic sources give nothing here.
        say_once(f"{HINTS}.{DOMAIN} (hints from mounts, devices and pod resources)")
    allow = _path_list(pod, container, "allow", where)
    deny = _path_list(pod, container, "deny", where)
    test = lookup(pod, container, TEST)
    if test is None:
        return []
    if not os.environ.get(TEST_APIS_ENV):
        say_once(f"{TEST}.{DOMAIN}")
        log.info("test topology hints are read only with %s set, as in nri-plugins",
                 TEST_APIS_ENV)  # fmt: skip
        return []
    out: dict[str, Hint] = {}
    for hint in _test_hints(test, where):
        if denied(hint.provider, allow, deny):
            log.info("%s: denied test topology hint %s", where, hint)
            continue
        out.setdefault(hint.provider, hint)  # upstream MergeTopologyHints: the first stays
    return list(out.values())


def _sources(value: str | None, where: str) -> frozenset[str] | None:
    """The automatic sources asked for; None when hints are off altogether."""
    if value is None:
        return frozenset({"all"})
    parsed = parse_bool(value)
    if parsed is not None:
        return frozenset({"all"}) if parsed else None
    out: set[str] = set()
    for word in value.split(","):
        if word == "none":
            return None
        if word not in _SOURCES:
            log.error("%s: invalid %s.%s preference %r (one of %s, or a boolean): ignoring it",
                      where, HINTS, DOMAIN, word, ", ".join(_SOURCES))  # fmt: skip
            continue
        out.add(word)
    return frozenset(out)


def _test_hints(value: str, where: str) -> tuple[Hint, ...]:
    parsed = _parse_test_hints(value)
    if isinstance(parsed, str):
        log.error("%s: invalid %s.%s annotation: %s", where, TEST, DOMAIN, parsed)
        return ()
    return parsed


@functools.lru_cache(maxsize=1024)
def _parse_test_hints(value: str) -> tuple[Hint, ...] | str:
    """``{name: {Provider, CPUs, NUMAs, Sockets}}``, or what is wrong with it; the first YAML
    document only, as Go's yaml.Unmarshal reads it (upstream's own e2e value ends in a stray
    ``}``). Cached by value: a workload's pods repeat theirs, and a result is immutable."""
    try:
        doc = next(yaml.load_all(value, Loader=_LOADER), None)
        return tuple(_hint(fields) for fields in _mapping(doc, "").values())
    except (yaml.YAMLError, ValueError) as e:
        return str(e)


def _mapping(doc: Any, what: str) -> Mapping[str, Any]:
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ValueError(f"{what or 'the value'} is not a mapping")
    return doc


def _hint(doc: Any) -> Hint:
    # encoding/json matches field names case-insensitively and skips unknown ones.
    fields = {str(k).lower(): v for k, v in _mapping(doc, "a hint").items()}
    for k in ("provider", "cpus", "numas", "sockets"):
        if k in fields and not isinstance(fields[k], str):
            raise ValueError(f"hint field {k}: {fields[k]!r} is not a string")
    try:
        return Hint(
            provider=fields.get("provider", ""),
            cpus=CpuSet.parse(fields.get("cpus", "")),
            numas=CpuSet.parse(fields.get("numas", "")),
            sockets=CpuSet.parse(fields.get("sockets", "")),
        )
    except CpuSetError as e:
        raise ValueError(str(e)) from e


def _resolve(hint: Hint, system: System) -> Hint:
    """nri-plugins ResolvePartialHints: a NUMA-only hint also names its nodes' online CPUs."""
    if hint.cpus or not hint.numas:
        return hint
    cpus = CpuSet()
    for n in hint.numas:
        node = system.nodes.get(n)
        if node is not None:
            cpus = cpus | node.cpus
    return attrs.evolve(hint, cpus=cpus & system.online)


# -- allow / deny path lists ----------------------------------------------------------------


@attrs.frozen
class PathList:
    glob: bool
    paths: tuple[str, ...]


def _path_list(pod: Pod, container: Container, kind: str, where: str) -> PathList | None:
    value = lookup(pod, container, f"{kind}.{HINTS}")
    if value is None:
        return None
    parsed = _parse_path_list(value)
    if isinstance(parsed, str):
        log.error("%s: invalid %s.%s.%s annotation: %s", where, kind, HINTS, DOMAIN, parsed)
        return None
    return parsed


@functools.lru_cache(maxsize=256)
def _parse_path_list(value: str) -> PathList | str:
    try:
        doc = {str(k).lower(): v for k, v in _mapping(yaml.load(value, Loader=_LOADER), "").items()}
        kind_of = doc.get("type", "prefix")
        if kind_of not in ("prefix", "glob"):
            raise ValueError(f"type {kind_of!r} is not prefix or glob")
        paths = doc.get("paths") or []
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            raise ValueError("paths is not a list of strings")
    except (yaml.YAMLError, ValueError) as e:
        return str(e)
    return PathList(kind_of == "glob", tuple(paths))


def denied(path: str, allow: PathList | None, deny: PathList | None) -> bool:
    """nri-plugins checkAllowedAndDeniedPaths: denied by a deny match unless an allow
    match lets it through; a malformed glob stops the check there, as upstream."""
    is_denied = False
    if deny is not None:
        for pattern in deny.paths:
            matched = _match(pattern, path, deny.glob)
            if matched is None:
                return False
            if matched:
                is_denied = True
                break
    if allow is not None:
        for pattern in allow.paths:
            matched = _match(pattern, path, allow.glob)
            if matched is None:
                return is_denied
            if matched:
                return False
    return is_denied


def _match(pattern: str, path: str, glob: bool) -> bool | None:
    if not glob:
        return path.startswith(pattern)
    rx = _glob_regex(pattern)
    if rx is None:
        log.error('malformed pattern "%s"', pattern)
        return None
    return rx.fullmatch(path) is not None


def _glob_regex(pattern: str) -> re.Pattern[str] | None:
    """Go's filepath.Match syntax: ``*`` and ``?`` stop at ``/``, ``[^...]`` negates."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "\\":
            if i + 1 >= len(pattern):
                return None
            i += 1
            out.append(re.escape(pattern[i]))
        elif ch == "[":
            end = pattern.find("]", i + 2 if pattern[i + 1 : i + 2] == "^" else i + 1)
            if end < 0:
                return None
            body = pattern[i + 1 : end]
            negate = body.startswith("^")
            body = body[1:] if negate else body
            if not body:
                return None
            out.append("[" + ("^" if negate else "") + body + "]")
            i = end
        else:
            out.append(re.escape(ch))
        i += 1
    try:
        return re.compile("".join(out))
    except re.error:
        return None


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
