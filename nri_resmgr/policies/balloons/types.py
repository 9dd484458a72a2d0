"""Balloon types: the configured ones plus the built-in ``reserved`` and ``default``, their
validation, and which type a container belongs to."""

from __future__ import annotations

import fnmatch
import logging

import attrs

from nri_resmgr.config.expressions import evaluate
from nri_resmgr.config.models import BalloonsSpec, BalloonType
from nri_resmgr.config.validate import validate_spec
from nri_resmgr.cpus.errors import PlacementError
from nri_resmgr.policies.balloons.preferences import ANNOTATION, preferences_of
from nri_resmgr.policies.subject import container_subject
from nri_resmgr.resmgr.model import Container, Pod
from nri_resmgr.shorten import short_repr

log = logging.getLogger(__name__)

RESERVED = "reserved"
DEFAULT = "default"
KUBE_SYSTEM = "kube-system"
PRIORITY_ORDER = {"high": 0, "normal": 1, "low": 2, "none": 3}


class BalloonsError(PlacementError):
    """A container the balloons policy cannot place: its creation fails with this reason."""


def balloon_types(spec: BalloonsSpec) -> list[BalloonType]:
    """The types in matching order: reserved first and default last unless user-defined."""
    # The loader validated already; a spec built in code gets the same checks here.
    validate_spec(spec)
    # There is exactly one reserved balloon, whatever the user's type says; the built-in
    # default type has one instance, as upstream's.
    types = [
        attrs.evolve(t, min_balloons=1, max_balloons=1) if t.name == RESERVED else t
        for t in spec.balloon_types
    ]
    names = {t.name for t in types}
    if RESERVED not in names:
        types.insert(
            0, BalloonType(name=RESERVED, min_balloons=1, max_balloons=1, allocator_priority="low")
        )
    if DEFAULT not in names:
        types.append(
            BalloonType(name=DEFAULT, min_balloons=1, max_balloons=1, allocator_priority="low")
        )
    return types


def creation_order(types: list[BalloonType]) -> list[BalloonType]:
    """The order minBalloons instances are created in: by allocatorPriority, then list order."""
    return sorted(types, key=lambda t: PRIORITY_ORDER.get(t.allocator_priority, 3))


def _matches(namespace: str, globs: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(namespace, g) for g in globs)


@attrs.frozen
class Matcher:
    types: tuple[BalloonType, ...]
    reserved_namespaces: tuple[str, ...]

    def by_name(self, name: str) -> BalloonType | None:
        return next((t for t in self.types if t.name == name), None)

    def type_for(self, pod: Pod, container: Container) -> BalloonType:
        """The annotated type, else the first whose matchExpressions or namespaces match,
        else ``default``; an annotation naming no type fails (as upstream's does)."""
        wanted = preferences_of(pod, container).balloon
        if wanted is not None:
            t = self.by_name(wanted.strip())
            if t is None:
                raise BalloonsError(
                    f"no balloon for annotation {short_repr(wanted)} ({ANNOTATION})"
                )
            return t
        subject = container_subject(pod, container)
        for t in self.types:
            if any(evaluate(e, subject) for e in t.match_expressions):
                return t
            if t.name == RESERVED and _matches(
                pod.namespace, (KUBE_SYSTEM, *self.reserved_namespaces)
            ):
                return t
            if _matches(pod.namespace, t.namespaces):
                return t
        default = self.by_name(DEFAULT)
        assert default is not None
        return default
