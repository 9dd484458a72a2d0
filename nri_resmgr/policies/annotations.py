"""Pod annotations with container scoping, as nri-plugins reads them.

``KEY/container.<name>`` beats ``KEY/pod``, which beats a bare ``KEY``.
"""

from __future__ import annotations

import logging

from nri_resmgr.config.notapplied import say_once
from nri_resmgr.resmgr.model import Container, Pod
from nri_resmgr.shorten import short_repr

log = logging.getLogger(__name__)

DOMAIN = "resource-policy.nri.io"

# Go's strconv.ParseBool, which nri-plugins uses for every boolean annotation: exactly these
# spellings, case-sensitive ("TRUE" and "True" but not "tRUE"; no "yes"/"no").
TRUE_VALUES = frozenset({"1", "t", "T", "true", "TRUE", "True"})
FALSE_VALUES = frozenset({"0", "f", "F", "false", "FALSE", "False"})


def lookup(pod: Pod, container: Container, name: str) -> str | None:
    if not pod.annotations:
        return None  # most pods: no keys to build (a Synchronize asks thousands of times)
    key = f"{name}.{DOMAIN}"
    for candidate in (f"{key}/container.{container.name}", f"{key}/pod", key):
        if candidate in pod.annotations:
            return pod.annotations[candidate]
    return None


def parse_bool(value: str) -> bool | None:
    """``value`` as Go's strconv.ParseBool reads it; None when it refuses it."""
    if value in TRUE_VALUES:
        return True
    if value in FALSE_VALUES:
        return False
    return None


def lookup_bool(pod: Pod, container: Container, name: str) -> bool | None:
    """A boolean preference; a value ParseBool refuses is logged and ignored."""
    value = lookup(pod, container, name)
    if value is None:
        return None
    parsed = parse_bool(value)
    if parsed is None:
        log.warning(
            "%s/%s: ignoring annotation %s.%s=%s: not a boolean (use one of "
            "1, t, T, true, TRUE, True, 0, f, F, false, FALSE, False)",
            pod.namespace,
            pod.name,
            name,
            DOMAIN,
            short_repr(value),
        )
    return parsed


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
