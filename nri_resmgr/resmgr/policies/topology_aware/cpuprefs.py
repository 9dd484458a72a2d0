"""Exclusive-CPU annotations beyond the QoS table: ``prefer-cpu-priority`` and
``require-isolated-cpus`` (with its ``prefer-isolated-cpus`` interplay), as nri-plugins'
``pod-preferences.go`` reads them and ``resources.go`` verifyStrictCPUPreferences enforces.

Of ``require-isolated-cpus`` and ``prefer-isolated-cpus``, the one of narrower scope
(container before pod) is the effective isolation preference, ``require`` winning a tie;
when ``require`` is the effective one, a container given exclusive CPUs that are not all
isolated fails creation instead of running on ordinary exclusive CPUs.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import attrs

from nri_resmgr.resmgr.annotations import DOMAIN, lookup, lookup_bool
from nri_resmgr.resmgr.cpualloc import PlacementError
from nri_resmgr.resmgr.cpuallocator import Priority
from nri_resmgr.resmgr.model import Container, Pod

if TYPE_CHECKING:
    from nri_resmgr.resmgr.policies.topology_aware.preferences import Want

__all__ = ["Isolation", "check_required_isolation", "cpu_priority", "isolation"]

log = logging.getLogger(__name__)

PREFER = "prefer-isolated-cpus"
REQUIRE = "require-isolated-cpus"
PRIORITY = "prefer-cpu-priority"


@attrs.frozen
class Isolation:
    value: bool | None
    """The effective annotation's value; None when neither key is annotated."""
    strict: bool


def _scope(pod: Pod, container: Container, name: str) -> int | None:
    key = f"{name}.{DOMAIN}"
    for scope, candidate in enumerate((f"{key}/container.{container.name}", f"{key}/pod", key)):
        if candidate in pod.annotations:
            return scope
    return None


def isolation(pod: Pod, container: Container) -> Isolation:
    require, prefer = _scope(pod, container, REQUIRE), _scope(pod, container, PREFER)
    if require is None and prefer is None:
        return Isolation(None, False)
    strict = require is not None and (prefer is None or require <= prefer)
    return Isolation(lookup_bool(pod, container, REQUIRE if strict else PREFER), strict)


def cpu_priority(pod: Pod, container: Container, default: Priority = Priority.NONE) -> Priority:
    """The preferred priority of exclusive CPUs: the annotation's, else ``default`` (the
    config's ``defaultCPUPriority``), which a value the annotation cannot parse also gets."""
    value = lookup(pod, container, PRIORITY)
    if value is None:
        return default
    try:
        return Priority.parse(value)
    except ValueError as e:
        log.warning("%s/%s: ignoring annotation %s.%s: %s", pod.namespace, pod.name, PRIORITY,
                    DOMAIN, e)  # fmt: skip
        return default


def check_required_isolation(want: Want, isolated: bool, name: str) -> None:
    """Raise PlacementError if ``want`` requires isolated CPUs and its grant has none."""
    if want.require_isolated and want.isolated and want.exclusive >= 1 and not isolated:
        raise PlacementError(
            f"{name}: {REQUIRE}: granted isolated CPUs fewer than the {want.exclusive} requested"
        )
