"""Pod annotations with container scoping, as nri-plugins reads them.

``KEY/container.<name>`` beats ``KEY/pod``, which beats a bare ``KEY``.
"""

from __future__ import annotations

import logging

from nri_resmgr.resmgr.model import Container, Pod

log = logging.getLogger(__name__)

DOMAIN = "resource-policy.nri.io"


def lookup(pod: Pod, container: Container, name: str) -> str | None:
    key = f"{name}.{DOMAIN}"
    for candidate in (f"{key}/container.{container.name}", f"{key}/pod", key):
        if candidate in pod.annotations:
            return pod.annotations[candidate]
    return None


def lookup_bool(pod: Pod, container: Container, name: str) -> bool | None:
    """A boolean preference; an unknown value is logged and ignored."""
    value = lookup(pod, container, name)
    if value is None:
        return None
    normalized = value.strip().lower()
    if normalized in ("true", "yes", "1"):
        return True
    if normalized in ("false", "no", "0"):
        return False
    log.warning(
        "%s/%s: ignoring annotation %s.%s=%r: not a boolean",
        pod.namespace,
        pod.name,
        name,
        DOMAIN,
        value,
    )
    return None
