"""A node's configuration outcome where the node itself keeps it: NRT attributes, or an Event.

The CR's ``status.nodes`` is bounded (see ``status``), so each node also reports its result
in a place of its own, seen by no other node:

- with the NodeResourceTopology export on (the default), as attributes of the node's own
  NRT object (``report_attributes``): ``nri-resmgr.io/config``, ``.../config-generation``,
  ``.../config-status`` and, on a failure, ``.../config-errors``. The NRT is written anyway
  when a configuration changes the zones, so the report usually costs no request of its
  own, and it is state: ``kubectl get noderesourcetopologies`` shows every node's result;
- without it, where the result did not go into the CR's status, as an Event on the CR
  (``EventReporter``): one per (node, CR, generation), ``Normal``/``ConfigApplied`` or
  ``Warning``/``ConfigRejected``, so ``kubectl describe`` on the CR shows it. Events are
  written once and watched by no agent. The Event's name is derived from what it reports,
  so a daemon that restarts and reports the same outcome again meets AlreadyExists.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import Any

from nri_resmgr.kube.client import KubeClient, KubeObject
from nri_resmgr.kube.errors import AlreadyExists
from nri_resmgr.kube.resources import EVENTS, ApiResource

REPORTER = "nri-resmgr"
MAX_NAME = 253
APPLIED = "ConfigApplied"
REJECTED = "ConfigRejected"
ATTRIBUTE_PREFIX = "nri-resmgr.io/"

NodeReporter = Callable[[str, KubeObject | None, dict[str, Any], bool], Awaitable[None]]
"""Reports (CR name, CR as seen, status entry, whether it also went into the CR's status)."""


def report_attributes(
    resource: ApiResource, namespace: str, cr_name: str, entry: dict[str, Any]
) -> list[tuple[str, str]]:
    """The NodeResourceTopology attributes that say what this node runs and how it went."""
    attributes = [
        (f"{ATTRIBUTE_PREFIX}config", f"{resource.kind} {namespace}/{cr_name}"),
        (f"{ATTRIBUTE_PREFIX}config-generation", str(entry.get("generation") or 0)),
        (f"{ATTRIBUTE_PREFIX}config-status", str(entry.get("status") or "")),
    ]
    if entry.get("errors"):
        attributes.append((f"{ATTRIBUTE_PREFIX}config-errors", str(entry["errors"])))
    return attributes


def event_name(cr_name: str, node_name: str, generation: int, uid: str) -> str:
    """``<cr>.<node>.g<generation>[.<uid prefix>]``, hashed down when too long for a name."""
    name = f"{cr_name}.{node_name}.g{generation}" + (f".{uid[:8]}" if uid else "")
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    return f"{name[: MAX_NAME - 17].rstrip('.-')}.{digest}"


def config_event(
    resource: ApiResource,
    namespace: str,
    cr_name: str,
    cr: KubeObject | None,
    node_name: str,
    entry: dict[str, Any],
) -> KubeObject:
    """The Event reporting ``entry`` (a status entry) of ``node_name`` on the CR."""
    uid = str(((cr or {}).get("metadata") or {}).get("uid") or "")
    generation = int(entry.get("generation") or 0)
    applied = entry.get("status") == "Success"
    what = f"{resource.kind} {namespace}/{cr_name} generation {generation}"
    message = f"node {node_name}: {what} " + (
        "applied" if applied else f"rejected: {entry.get('errors') or 'no reason given'}"
    )
    involved = {"apiVersion": resource.api_version, "kind": resource.kind, "name": cr_name,
                "namespace": namespace}  # fmt: skip
    if uid:
        involved["uid"] = uid
    name = event_name(cr_name, node_name, generation, uid)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": involved,
        "reason": APPLIED if applied else REJECTED,
        "type": "Normal" if applied else "Warning",
        "message": message,
        "source": {"component": REPORTER, "host": node_name},
        "reportingComponent": REPORTER,
        "reportingInstance": node_name,
        "firstTimestamp": entry.get("timestamp"),
        "lastTimestamp": entry.get("timestamp"),
        "count": 1,
    }


class EventReporter:
    def __init__(
        self, client: KubeClient, resource: ApiResource, namespace: str, node_name: str
    ) -> None:
        self._client = client
        self._resource = resource
        self._namespace = namespace
        self._node_name = node_name
        self.created = 0

    async def report(
        self, cr_name: str, cr: KubeObject | None, entry: dict[str, Any], in_cr: bool
    ) -> None:
        """Creates the Event, unless the result went into the CR's status; one that exists
        already (this very report) is left as it is."""
        if in_cr:
            return
        event = config_event(self._resource, self._namespace, cr_name, cr, self._node_name, entry)
        try:
            await self._client.create(EVENTS, event, self._namespace)
        except AlreadyExists:
            return
        self.created += 1
