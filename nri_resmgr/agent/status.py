"""This node's entry in a config CR's status: ``status.nodes.<node>``.

Entries are written with a JSON merge patch on the status subresource, so nodes sharing a
CR (``default``, ``group.*``) never overwrite each other's entries, and ``null`` removes only
this node's. Writes that fail are retried with backoff; the latest wanted entry per CR wins.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

import trio

from nri_resmgr.backoff import Backoff
from nri_resmgr.kube.client import KubeClient, KubeObject
from nri_resmgr.kube.errors import ApiError, NotFound
from nri_resmgr.kube.resources import ApiResource

log = logging.getLogger(__name__)

SUCCESS = "Success"
FAILURE = "Failure"

# One CR's status holds an entry per node, and the API server refuses objects above ~1.5 MB:
# a failure entry is kept small enough that thousands of nodes fit.
MAX_STATUS_ERRORS = 10
MAX_STATUS_ERROR_TEXT = 1024

StatusEntry = dict[str, Any]


def rfc3339(moment: datetime.datetime | None = None) -> str:
    moment = moment or datetime.datetime.now(datetime.UTC)
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def success_entry(generation: int, moment: datetime.datetime | None = None) -> StatusEntry:
    return {"status": SUCCESS, "generation": generation, "errors": "",
            "timestamp": rfc3339(moment)}  # fmt: skip


def failure_entry(
    generation: int, errors: list[str], moment: datetime.datetime | None = None
) -> StatusEntry:
    return {"status": FAILURE, "generation": generation, "errors": bounded_errors(errors),
            "timestamp": rfc3339(moment)}  # fmt: skip


def bounded_errors(errors: list[str]) -> str:
    """The first errors, joined, within ``MAX_STATUS_ERROR_TEXT`` characters; says what is left."""
    shown = "; ".join(errors[:MAX_STATUS_ERRORS])
    if len(errors) > MAX_STATUS_ERRORS:
        shown += f"; … and {len(errors) - MAX_STATUS_ERRORS} more"
    if len(shown) > MAX_STATUS_ERROR_TEXT:
        shown = shown[: MAX_STATUS_ERROR_TEXT - 20] + "… (truncated)"
    return shown


def status_patch(node_name: str, entry: StatusEntry | None) -> KubeObject:
    """The merge patch that sets (or, with None, removes) one node's entry."""
    return {"status": {"nodes": {node_name: entry}}}


class StatusWriter:
    """Queues the wanted entry per CR name and writes it until the API server takes it."""

    def __init__(
        self,
        client: KubeClient,
        resource: ApiResource,
        namespace: str,
        node_name: str,
        backoff: Backoff | None = None,
    ) -> None:
        self._client = client
        self._resource = resource
        self._namespace = namespace
        self._node_name = node_name
        self._backoff = backoff or Backoff(initial=0.5, maximum=30.0)
        self._pending: dict[str, StatusEntry | None] = {}
        self._wakeup = trio.Event()
        self.writes = 0
        self.failures = 0

    @property
    def pending(self) -> dict[str, StatusEntry | None]:
        return dict(self._pending)

    def set(self, cr_name: str, entry: StatusEntry | None) -> None:
        """Wants ``entry`` (None: no entry) in CR ``cr_name``; replaces any unwritten one."""
        self._pending[cr_name] = entry
        self._wakeup.set()

    async def run(self) -> None:
        """Writes whatever is wanted, as it is wanted, until cancelled."""
        while True:
            await self._wakeup.wait()
            self._wakeup = trio.Event()
            await self.flush()

    async def flush(self) -> None:
        """Writes every wanted entry, retrying failures with backoff; returns when none is left."""
        while self._pending:
            name, entry = next(iter(self._pending.items()))
            try:
                await self._write(name, entry)
            except NotFound:
                log.info("config %s/%s is gone; its status is not written",
                         self._namespace, name)  # fmt: skip
            except ApiError as exc:
                self.failures += 1
                log.warning("writing status of config %s/%s failed: %s; retrying",
                            self._namespace, name, exc)  # fmt: skip
                await self._backoff.sleep()
                continue
            self._backoff.reset()
            if self._pending.get(name, ...) is entry:  # not replaced while being written
                del self._pending[name]

    async def _write(self, name: str, entry: StatusEntry | None) -> None:
        patch = status_patch(self._node_name, entry)
        await self._client.patch(self._resource, name, patch, self._namespace, subresource="status")
        self.writes += 1
        what = entry["status"] if entry else "cleared"
        log.debug("config %s/%s: status of node %s %s", self._namespace, name,
                  self._node_name, what)  # fmt: skip
