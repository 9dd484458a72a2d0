"""Pod annotations with container scoping, as nri-plugins reads them, read once per container.

``KEY/container.<name>`` beats ``KEY/pod``, which beats a bare ``KEY`` (nri-plugins'
GetEffectiveAnnotation). ``Annotations.of`` takes a container's keys of the policy domain
from its pod's annotations in one pass; a policy decodes those into one frozen value of its
own (topology-aware: ``preferences.Preferences``) and reads fields. The engine asks for a
container's preferences by its pod and container, the objects the policy decoded at the
edge: ``Decoded`` remembers recent decodes by identity, so each container is decoded once
per event, however many parts of a placement read it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Generic, TypeVar

import attrs

from nri_resmgr.config.notapplied import say_once
from nri_resmgr.errors import InvalidValue
from nri_resmgr.resmgr.model import Container, Pod
from nri_resmgr.shorten import short_repr

log = logging.getLogger(__name__)

__all__ = [
    "DOMAIN",
    "AnnotationError",
    "Annotations",
    "Decoded",
    "lookup_bool",
    "parse_bool",
    "report_unread",
]

DOMAIN = "resource-policy.nri.io"
_DOMAIN_SUFFIX = f".{DOMAIN}"

# Go's strconv.ParseBool, which nri-plugins uses for every boolean annotation: exactly these
# spellings, case-sensitive ("TRUE" and "True" but not "tRUE"; no "yes"/"no").
TRUE_VALUES = frozenset({"1", "t", "T", "true", "TRUE", "True"})
FALSE_VALUES = frozenset({"0", "f", "F", "false", "FALSE", "False"})

CONTAINER, POD, BARE = range(3)
"""The scopes of a key, narrowest first: ``KEY/container.<name>``, ``KEY/pod``, ``KEY``."""


class AnnotationError(InvalidValue):
    """An annotation's value that cannot be read; the message names the problem."""


def parse_bool(value: str) -> bool | None:
    """``value`` as Go's strconv.ParseBool reads it; None when it refuses it."""
    if value in TRUE_VALUES:
        return True
    if value in FALSE_VALUES:
        return False
    return None


_NONE: Mapping[str, str] = MappingProxyType({})


@attrs.frozen
class Annotations:
    """One container's annotations of the policy domain: per name (``cpu.preserve`` for
    ``cpu.preserve.resource-policy.nri.io``), the value at the narrowest scope its pod sets,
    and that scope; and the pod's own keys (``resource-policy.nri.io/affinity``)."""

    namespace: str
    pod: str
    container: str
    values: Mapping[str, str] = _NONE
    scopes: Mapping[str, int] = attrs.field(default=_NONE, repr=False)
    pod_keys: Mapping[str, str] = _NONE
    """By the name after ``resource-policy.nri.io/``: keys that are the pod's, not scoped."""

    @classmethod
    def of(cls, pod: Pod, container: Container) -> Annotations:
        values: dict[str, str] = {}
        scopes: dict[str, int] = {}
        pod_keys: dict[str, str] = {}
        own = f"container.{container.name}"
        for key, value in pod.annotations.items():
            head, slash, tail = key.partition("/")
            if head == DOMAIN and slash:
                pod_keys[tail] = value
                continue
            if not head.endswith(_DOMAIN_SUFFIX):
                continue
            if not slash:
                scope = BARE
            elif tail == "pod":
                scope = POD
            elif tail == own:
                scope = CONTAINER
            else:
                continue
            name = head[: -len(_DOMAIN_SUFFIX)]
            if scope < scopes.get(name, BARE + 1):
                values[name], scopes[name] = value, scope
        return cls(pod.namespace, pod.name, container.name, values, scopes, pod_keys)

    @property
    def where(self) -> str:
        """``namespace/pod``, as log lines name the pod."""
        return f"{self.namespace}/{self.pod}"

    def get(self, name: str) -> str | None:
        return self.values.get(name)

    def scope(self, name: str) -> int | None:
        return self.scopes.get(name)

    def flag(self, name: str) -> bool | None:
        """A boolean preference; a value ParseBool refuses is logged and ignored."""
        value = self.values.get(name)
        if value is None:
            return None
        parsed = parse_bool(value)
        if parsed is None:
            log.warning(
                "%s: ignoring annotation %s.%s=%s: not a boolean (use one of "
                "1, t, T, true, TRUE, True, 0, f, F, false, FALSE, False)",
                self.where,
                name,
                DOMAIN,
                short_repr(value),
            )
        return parsed


T = TypeVar("T")


class Decoded(Generic[T]):
    """A policy's decode of a container's annotations, remembered for the pod and container
    objects it was made from (by identity: a later event brings new objects, decoded anew).

    ``none`` is the value of a pod without annotations (most pods: nothing to decode or
    remember). At most ``limit`` decodes are kept, the oldest dropped first; enough for a
    Synchronize, whose containers are all decoded before any is placed.
    """

    def __init__(self, decode: Callable[[Annotations], T], none: T, limit: int = 4096) -> None:
        self._decode = decode
        self.none = none
        self._limit = limit
        self._recent: dict[str, tuple[Pod, Container, T]] = {}

    def __call__(self, pod: Pod, container: Container) -> T:
        if not pod.annotations:
            return self.none
        hit = self._recent.get(container.id)
        if hit is not None and hit[0] is pod and hit[1] is container:
            return hit[2]
        value = self._decode(Annotations.of(pod, container))
        recent = self._recent
        recent.pop(container.id, None)
        recent[container.id] = (pod, container, value)
        if len(recent) > self._limit:
            del recent[next(iter(recent))]
        return value


def lookup_bool(pod: Pod, container: Container, name: str) -> bool | None:
    """One boolean preference, for a reader outside a policy's decoded value."""
    if not pod.annotations:
        return None
    return Annotations.of(pod, container).flag(name)


def report_unread(pod: Pod, keys: frozenset[str]) -> None:
    """Say once per key (per process) that ``pod`` carries an annotation in ``keys`` that the
    policy accepts but does not act on; a scoped key (``KEY/pod``, ``KEY/container.x``)
    counts as ``KEY``. The rule is no silent no-ops: a user setting one learns it is inert."""
    if not pod.annotations:
        return  # most pods, on every create
    for annotation in pod.annotations:
        key = annotation
        if key.endswith("/pod") or "/container." in key:
            key = key.rsplit("/", 1)[0]
        if key in keys:
            say_once(key)
