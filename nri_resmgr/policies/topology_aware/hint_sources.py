"""Where a container's topology hints come from, as nri-plugins gathers them
(``pkg/resmgr/cache/container.go`` generateTopologyHints, checkAllowedAndDeniedPaths;
``pkg/topology`` ResolvePartialHints).

- ``test.topologyhints`` (``{name: {CPUs|NUMAs|Sockets|Provider: "..."}}``): honoured when
  ``ENABLE_TEST_APIS`` is set in the daemon's environment, as upstream (whose chart always
  sets it); otherwise said once to be accepted, not applied.
- ``topologyhints``: ``false``/``none`` turns every hint off (test hints too, as upstream);
  a list (``mounts,devices,pod-resources,all``) selects the automatic sources.
- ``allow.topologyhints``/``deny.topologyhints`` (``{type: prefix|glob, paths: [...]}``):
  filter hints by provider path, deny first, an allow match overriding it.
- The container's writable device nodes (``device_hints``), unless turned off.
- Automatic hints from mounts' sysfs entries and from kubelet's pod resources API are not
  generated: the runtime model carries no mounts and there is no pod-resources client. Said
  once when a container asks for them explicitly.

Every hint annotation is read whenever the pod has annotations, as upstream reads them
(``preferences.Preferences``, decoded once per container); here they are parsed.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from collections.abc import Mapping
from typing import Any

import attrs
import yaml

from nri_resmgr.config.notapplied import say_once
from nri_resmgr.cpuset import CpuSet, CpuSetError
from nri_resmgr.policies.annotations import DOMAIN, AnnotationError, parse_bool
from nri_resmgr.policies.topology_aware.device_hints import device_hints
from nri_resmgr.policies.topology_aware.hints import ContainerHints, Hint
from nri_resmgr.policies.topology_aware.preferences import Preferences, preferences_of
from nri_resmgr.resmgr.model import Container, Pod
from nri_resmgr.shorten import short_repr, shorten
from nri_resmgr.sysfs import System

__all__ = ["PathList", "container_hints", "denied"]

log = logging.getLogger(__name__)

HINTS = "topologyhints"
TEST = f"test.{HINTS}"
STRICT = f"strict.{HINTS}"
PICK = "pick-resources-by-hints"
TEST_APIS_ENV = "ENABLE_TEST_APIS"
"""nri-plugins' pkg/utils EnvVarEnableTestAPIs: test hints only when set (non-empty)."""
_SOURCES = ("mounts", "devices", "pod-resources", "all", "none")
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml when present: the pure-Python loader takes ~1 ms per hint annotation."""


def container_hints(pod: Pod, container: Container, system: System) -> ContainerHints | None:
    """The container's hints, NUMA-only ones resolved to CPUs; None when it has none. Every
    hint annotation is read whenever the pod has annotations, as upstream reads them."""
    if not pod.annotations and not container.devices:
        return None  # the common case: nothing to read
    prefs = preferences_of(pod, container)
    where = f"{pod.namespace}/{pod.name}/{container.name}"
    hints = _gather(prefs, container, system.host_root, where)
    if not hints:
        return None
    if prefs.pick_by_hints:
        # nri-plugins getMemOfferByHints: the memory zone of the pod-resource hints.
        say_once(f"{PICK}.{DOMAIN} (memory zone by hints)")
    resolved = tuple(_resolve(h, system) for h in hints)
    return ContainerHints(resolved, prefs.strict_hints, prefs.pick_by_hints)


def _gather(prefs: Preferences, container: Container, root: str, where: str) -> list[Hint]:
    """Device hints, then test hints (upstream's order: mounts, devices, pod resources,
    test), the first of a provider staying (MergeTopologyHints)."""
    sources = _sources(prefs.hint_sources, where)
    if sources is None:
        return []
    if sources & {"mounts", "pod-resources", "all"} and prefs.hint_sources:
        # Asked for explicitly: say that these sources give nothing here.
        say_once(f"{HINTS}.{DOMAIN} (hints from mounts and pod resources)")
    allow = _path_list(prefs.allow_hints, "allow", where)
    deny = _path_list(prefs.deny_hints, "deny", where)
    out: dict[str, Hint] = {}
    if container.devices and sources & {"devices", "all"}:
        for hint in device_hints(root, container.devices, lambda p: denied(p, allow, deny)):
            out.setdefault(hint.provider, hint)
    test = prefs.test_hints
    if test is None:
        return list(out.values())
    if not os.environ.get(TEST_APIS_ENV):
        say_once(f"{TEST}.{DOMAIN}")
        log.info("test topology hints are read only with %s set, as in nri-plugins",
                 TEST_APIS_ENV)  # fmt: skip
        return list(out.values())
    for hint in _test_hints(test, where):
        if denied(hint.provider, allow, deny):
            log.info("%s: denied test topology hint %s", where, hint)
            continue
        out.setdefault(hint.provider, hint)
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
            log.error("%s: invalid %s.%s preference %s (one of %s, or a boolean): ignoring it",
                      where, HINTS, DOMAIN, short_repr(word), ", ".join(_SOURCES))  # fmt: skip
            continue
        out.add(word)
    return frozenset(out)


def _test_hints(value: str, where: str) -> tuple[Hint, ...]:
    parsed = _parse_test_hints(value)
    if isinstance(parsed, str):
        log.error("%s: invalid %s.%s annotation: %s", where, TEST, DOMAIN, shorten(parsed))
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
    except (yaml.YAMLError, ValueError) as e:  # ours, and YAML dates out of range
        return str(e)


def _mapping(doc: Any, what: str) -> Mapping[str, Any]:
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise AnnotationError(f"{what or 'the value'} is not a mapping")
    return doc


def _hint(doc: Any) -> Hint:
    # encoding/json matches field names case-insensitively and skips unknown ones.
    fields = {str(k).lower(): v for k, v in _mapping(doc, "a hint").items()}
    for k in ("provider", "cpus", "numas", "sockets"):
        if k in fields and not isinstance(fields[k], str):
            raise AnnotationError(f"hint field {k}: {fields[k]!r} is not a string")
    try:
        return Hint(
            provider=fields.get("provider", ""),
            cpus=CpuSet.parse(fields.get("cpus", "")),
            numas=CpuSet.parse(fields.get("numas", "")),
            sockets=CpuSet.parse(fields.get("sockets", "")),
        )
    except CpuSetError as e:
        raise AnnotationError(str(e)) from e


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


def _path_list(value: str | None, kind: str, where: str) -> PathList | None:
    if value is None:
        return None
    parsed = _parse_path_list(value)
    if isinstance(parsed, str):
        log.error("%s: invalid %s.%s.%s annotation: %s", where, kind, HINTS, DOMAIN,
                  shorten(parsed))  # fmt: skip
        return None
    return parsed


@functools.lru_cache(maxsize=256)
def _parse_path_list(value: str) -> PathList | str:
    try:
        doc = {str(k).lower(): v for k, v in _mapping(yaml.load(value, Loader=_LOADER), "").items()}
        kind_of = doc.get("type", "prefix")
        if kind_of not in ("prefix", "glob"):
            raise AnnotationError(f"type {kind_of!r} is not prefix or glob")
        paths = doc.get("paths") or []
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            raise AnnotationError("paths is not a list of strings")
    except (yaml.YAMLError, ValueError) as e:  # ours, and YAML dates out of range
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
