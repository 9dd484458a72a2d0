"""Match expressions and ``${key}`` substitutions on containers, as nri-plugins evaluates
them (``matchExpressions``, ``preserve``, ``groupBy``).

A key is a path into the container: ``name``, ``namespace``, ``qosclass``, ``id``,
``labels/<k>``, ``tags/<k>``, or ``pod/<key>`` for the pod's ``name``, ``namespace``,
``qosclass``, ``id``, ``uid`` and ``labels/<k>``. A key starting with ``:`` joins several
keys: ``:<key-sep><value-sep>k1<key-sep>k2`` (``::`` when the separators are omitted).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Mapping, Sequence

from nri_resmgr.config.models import Expression
from nri_resmgr.errors import ResmgrError

Resolver = Callable[[str], object]
"""Looks up one path component of an evaluated object: a value, a map, another resolver,
or None."""

_SCALAR = {"id", "uid", "name", "namespace", "qosclass"}
_MAPS = {"labels", "tags"}
_SINGLE = {"Equals", "NotEqual", "Matches", "MatchesNot"}
_NONE = {"Exists", "NotExist", "AlwaysTrue"}


def split_keys(key: str) -> tuple[list[str], str]:
    """The keys of a (possibly joined) key, and the separator of their values."""
    if len(key) < 4 or key[0] != ":":
        return [key], ""
    body = key[1:]
    ksep, vsep = body[0], body[1]
    if _separator(ksep) and _separator(vsep):
        body = body[2:]
    else:
        ksep = vsep = ":"
    return body.split(ksep), vsep


def _separator(c: str) -> bool:
    return not (c.isalnum() or c in "/.")


def key_error(key: str) -> str | None:
    """Why ``key`` names nothing a container has, or None if it is valid."""
    for one in split_keys(key)[0]:
        parts = one.lstrip("/").split("/")
        while parts:
            head, rest = parts[0], parts[1:]
            if head in _SCALAR:
                if rest:
                    return f"trailing key {'/'.join(rest)!r} after {head!r}"
                break
            if head == "pod":
                if not rest:
                    return "missing trailing pod key after 'pod'"
                parts = rest
                continue
            if head in _MAPS:
                if not rest:
                    return f"missing trailing map key after {head!r}"
                break
            return f"unknown key {head!r}"
    return None


def check_expressions(exprs: Sequence[Expression], where: str) -> list[str]:
    errors = []
    for i, e in enumerate(exprs):
        path = f"{where}.matchExpressions[{i}]"
        problem = key_error(e.key) if e.operator != "AlwaysTrue" else None
        if problem:
            errors.append(f"{path}.key: {problem} in {e.key!r}")
        if e.operator in _SINGLE and len(e.values) != 1:
            errors.append(f"{path}: operator {e.operator} takes exactly one value")
        if e.operator in _NONE and e.values:
            errors.append(f"{path}: operator {e.operator} takes no values")
    return errors


_REF = re.compile(r"\$(\$|\{[^{}$]*\}|[^${}]*)")


def check_group_by(text: str, where: str) -> list[str]:
    for ref in _references(text):
        if not ref:
            return [f"{where}: empty reference in {text!r}"]
        problem = key_error(ref)
        if problem:
            return [f"{where}: {problem} in {text!r}"]
    if text.count("{") != text.count("}"):
        return [f"{where}: unbalanced braces in {text!r}"]
    return []


def _references(text: str) -> list[str]:
    refs = []
    for m in _REF.finditer(text):
        ref = m.group(1)
        if ref != "$":
            refs.append(ref[1:-1] if ref.startswith("{") else ref)
    return refs


def resolve(root: Resolver, key: str) -> str | None:
    """The value of one key (a path), or None if it does not exist."""
    obj: object = root
    parts = [p for p in key.strip("/").split("/") if p]
    while parts:
        if callable(obj):
            obj, parts = obj(parts[0]), parts[1:]
        elif isinstance(obj, Mapping):
            # The rest of the path is one map key (label names may hold '/').
            obj, parts = obj.get("/".join(parts)), []
        else:
            return None
    return obj if isinstance(obj, str) else None


def key_value(root: Resolver, key: str) -> str | None:
    keys, vsep = split_keys(key)
    if len(keys) == 1:
        return resolve(root, keys[0])
    values = [resolve(root, k) for k in keys]
    if all(v is None for v in values):
        return None
    return vsep.join(v or "" for v in values)


def evaluate(e: Expression, root: Resolver) -> bool:
    if e.operator == "AlwaysTrue":
        return True
    value = key_value(root, e.key)
    found = value is not None
    v = value or ""
    op = e.operator
    if op == "Equals":
        return found and (v == e.values[0] or e.values[0] == "*")
    if op == "NotEqual":
        return not found or v != e.values[0]
    if op in ("Matches", "MatchesNot"):
        hit = found and fnmatch.fnmatchcase(v, e.values[0])
        return hit if op == "Matches" else not hit
    if op in ("In", "NotIn"):
        hit = found and any(v == x or x == "*" for x in e.values)
        return hit if op == "In" else not hit
    if op in ("MatchesAny", "MatchesNone"):
        hit = found and any(fnmatch.fnmatchcase(v, x) for x in e.values)
        return hit if op == "MatchesAny" else not hit
    if op == "Exists":
        return found
    return not found  # NotExist


class UnresolvedKey(ResmgrError, KeyError):
    """A ``$key`` in a ``groupBy`` that the container does not have."""


def expand(text: str, root: Resolver) -> str:
    """``text`` with ``$key`` and ``${key}`` replaced; raise UnresolvedKey (a KeyError) for
    an unknown key."""

    def value(m: re.Match[str]) -> str:
        ref = m.group(1)
        if ref in ("", "$"):
            return "$"
        key = ref[1:-1] if ref.startswith("{") else ref
        got = key_value(root, key)
        if got is None:
            raise UnresolvedKey(f"unresolvable key {key!r} in {text!r}")
        return got

    return _REF.sub(value, text)
