"""Keys the loader accepts (for compatibility with nri-plugins CRs) that nri-resmgr does
not act on: each is said once at load, so that nothing is silently ignored.

A policy declares its paths (``spec.balloonTypes[].cpuClass``) and calls ``report`` with
every spec it takes; a path whose value differs from its default is logged once per process.
"""

from __future__ import annotations

import logging
import typing
from collections.abc import Iterable, Iterator
from typing import Any

import attrs

from nri_resmgr import __version__
from nri_resmgr.config.fields import key_of
from nri_resmgr.config.values import VALUE_TYPES

log = logging.getLogger(__name__)

_reported: set[str] = set()


def leaf_paths(cls: type, prefix: str = "spec") -> Iterator[str]:
    """Every configurable path of an attrs model: ``spec.a.b``, ``spec.list[].c``."""
    hints = typing.get_type_hints(cls)
    for a in attrs.fields(cls):
        path = f"{prefix}.{key_of(a)}"
        inner = _model_of(hints[a.name])
        if inner is None:
            yield path
        else:
            model, many = inner
            yield from leaf_paths(model, path + ("[]" if many else ""))


def _model_of(hint: Any) -> tuple[type, bool] | None:
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    if origin is tuple and args and _is_section(args[0]):
        return args[0], True
    candidates = [x for x in args if _is_section(x)] if args else []
    if candidates:
        return candidates[0], False
    if _is_section(hint):
        return hint, False
    return None


def _is_section(t: Any) -> bool:
    """A model of keys (an attrs class that is not one typed value, ``values.VALUE_TYPES``)."""
    return attrs.has(t) and t not in VALUE_TYPES


def values_at(obj: Any, path: str) -> list[tuple[Any, Any]]:
    """(value, default) pairs found at ``path`` (which starts with ``spec.``) inside ``obj``."""
    parts = path.split(".")[1:]
    found: list[tuple[Any, Any]] = []
    _walk(obj, parts, found)
    return found


def _walk(obj: Any, parts: list[str], found: list[tuple[Any, Any]]) -> None:
    if obj is None:
        return
    head, rest = parts[0], parts[1:]
    many = head.endswith("[]")
    name = head[:-2] if many else head
    field = next((a for a in attrs.fields(type(obj)) if key_of(a) == name), None)
    if field is None:
        raise KeyError(f"{type(obj).__name__} has no key {name!r}")
    value = getattr(obj, field.name)
    if not rest:
        default = field.default
        if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
            default = default.factory()
        found.append((value, default))
        return
    for item in value if many else (value,):
        _walk(item, rest, found)


def in_use(spec: Any, paths: Iterable[str]) -> list[str]:
    """The declared paths whose value is set to something other than the default."""
    return [p for p in paths if any(v != d for v, d in values_at(spec, p))]


def report(spec: Any, paths: Iterable[str]) -> list[str]:
    """Log, once per process and key, the declared paths ``spec`` sets; return them all."""
    used = in_use(spec, paths)
    for p in used:
        say_once(p)
    return used


def say_once(path: str, because: str = "") -> None:
    """The one message for a key that is accepted but has no effect, once per process.
    ``because``: when the key is not applied in this configuration only (another key
    switches it off), that reason instead of the version."""
    if path in _reported:
        return
    _reported.add(path)
    if because:
        log.warning("%s: accepted, not applied: %s", path, because)
    else:
        log.warning("%s: accepted, not applied by nri-resmgr %s", path, __version__)
