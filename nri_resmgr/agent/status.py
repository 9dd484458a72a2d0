"""This node's result of applying a config CR: ``status.nodes.<node>``, or an Event.

Entries are written with a JSON merge patch on the status subresource, so nodes sharing a
CR (``default``, ``group.*``) never overwrite each other's entries, and ``null`` removes only
this node's. Writes that fail are retried with backoff; the latest wanted entry per CR wins.

At fleet scale the CR cannot hold every node: every node of a group watches the CR, so each
status write reaches every one of them, and N nodes reporting into one CR makes N writes of
an object growing to N entries, sent to N watchers (N**2 events, N**3 bytes). So
``status.nodes`` is bounded: a node writes its entry there only if it has one already or
the map has room (``SUCCESS_ROOM`` entries for a success, ``FAILURE_ROOM`` for a failure,
which the CRD enforces with ``maxProperties``, so nodes racing for the last places cannot
overshoot). Every node also reports its result where it keeps it itself (``report``: its
NodeResourceTopology, or an Event on the CR when the result is not in the CR): seen by no
other node. A group of up to ``SUCCESS_ROOM`` nodes therefore reports exactly as nri-plugins
does; a larger one has the first nodes' results and up to ``FAILURE_ROOM`` failures in the
CR, and every node's result in its own place.
"""

from __future__ import annotations

import datetime
import logging
import random
from collections.abc import Callable
from typing import Any

import trio

from nri_resmgr.agent.report import NodeReporter
from nri_resmgr.backoff import Backoff
from nri_resmgr.kube.client import KubeClient, KubeObject
from nri_resmgr.kube.errors import ApiError, Invalid, NotFound
from nri_resmgr.kube.resources import ApiResource

log = logging.getLogger(__name__)

SUCCESS = "Success"
FAILURE = "Failure"

# One CR's status holds an entry per node, and the API server refuses objects above ~1.5 MB:
# a failure entry is kept small enough that thousands of nodes fit.
MAX_STATUS_ERRORS = 10
MAX_STATUS_ERROR_TEXT = 1024

SUCCESS_ROOM = 8
"""Successes ``status.nodes`` holds (the CRD's rule): a group this small is reported in full."""
FAILURE_ROOM = 32
"""Entries a failure may join it at; the CRD's ``maxProperties`` of ``status.nodes``."""

PLACE_SPREAD = 5.0
"""Seconds (at most, at random) a node waits before taking a new place in ``status.nodes``."""

StatusEntry = dict[str, Any]
CurrentCr = Callable[[str], KubeObject | None]


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


def status_entries(cr: KubeObject | None) -> dict[str, Any]:
    nodes = ((cr or {}).get("status") or {}).get("nodes")
    return nodes if isinstance(nodes, dict) else {}


def belongs_in_cr(cr: KubeObject | None, node_name: str, entry: StatusEntry | None) -> bool:
    """Whether this node's ``entry`` (None: no entry) is written into the CR's status."""
    entries = status_entries(cr)
    if node_name in entries:
        return True  # our own entry is updated or removed in place: the map does not grow
    if entry is None:
        return False  # nothing there to remove
    if entry.get("status") == FAILURE:
        return len(entries) < FAILURE_ROOM
    successes = [e for e in entries.values() if isinstance(e, dict) and e.get("status") == SUCCESS]
    return len(successes) < SUCCESS_ROOM and len(entries) < FAILURE_ROOM


class StatusWriter:
    """Queues the wanted entry per CR name and writes it until the API server takes it.

    With ``report`` and ``current`` (the CR as this node last saw it) the entry goes into
    the CR's status where ``belongs_in_cr`` says, and to ``report`` always. Without them
    every entry goes to the CR, as nri-plugins writes it.
    """

    def __init__(
        self,
        client: KubeClient,
        resource: ApiResource,
        namespace: str,
        node_name: str,
        backoff: Backoff | None = None,
        *,
        current: CurrentCr | None = None,
        report: NodeReporter | None = None,
    ) -> None:
        self._client = client
        self._resource = resource
        self._namespace = namespace
        self._node_name = node_name
        self._backoff = backoff or Backoff(initial=0.5, maximum=30.0)
        self._current = current
        self.report = report
        self.place_spread = PLACE_SPREAD
        self._pending: dict[str, StatusEntry | None] = {}
        self._wakeup = trio.Event()
        self.writes = 0
        self.failures = 0
        self.conflicts = 0
        """Failures that were 409 Conflict (the object changed under the write)."""
        self.written: dict[str, StatusEntry | None] = {}
        """The last entry the API server took (into the CR or as an Event), per CR name."""
        self._in_cr: set[str] = set()  # CRs this writer put an entry of ours into

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
                self.conflicts += exc.status == 409
                log.warning("writing status of config %s/%s failed: %s; retrying",
                            self._namespace, name, exc)  # fmt: skip
                await self._backoff.sleep()
                continue
            self._backoff.reset()
            if self._pending.get(name, ...) is entry:  # not replaced while being written
                del self._pending[name]

    async def _write(self, name: str, entry: StatusEntry | None) -> None:
        cr = self._current(name) if self._current else None
        into_cr = self._into_cr(name, cr, entry)
        if into_cr and self._claims_a_place(cr, entry) and self.place_spread > 0:
            # A whole fleet that starts at once sees the same empty map: wait a moment and
            # look again, so that the first writers' entries are seen and the others stay away
            # (one write each instead of hundreds the CRD refuses).
            await trio.sleep(random.uniform(0, self.place_spread))
            cr = self._current(name) if self._current else None
            into_cr = self._into_cr(name, cr, entry)
        if into_cr:
            if entry is not None:
                # Counted as there once sent: a stop that cancels the write after the server
                # took it, or before the CR's watch shows it, must still remove it.
                self._in_cr.add(name)
            try:
                await self._patch(name, entry)
            except Invalid as exc:
                if self.report is None or entry is None or self._node_name in status_entries(cr):
                    raise
                # A new entry refused: other nodes took the last places first (the CRD's
                # bounds). Reported in the node's own place only.
                log.info("config %s/%s: no room for node %s in status (%s)", self._namespace,
                         name, self._node_name, exc)  # fmt: skip
                into_cr = False
                self._in_cr.discard(name)
            if entry is None:
                self._in_cr.discard(name)
        if entry is not None and self.report is not None:
            await self.report(name, cr, entry, into_cr)
        self.written[name] = entry
        what = entry["status"] if entry else "cleared"
        where = "in status" if into_cr else "not in status"
        log.debug("config %s/%s: status of node %s %s, %s", self._namespace, name,
                  self._node_name, what, where)  # fmt: skip

    def _claims_a_place(self, cr: KubeObject | None, entry: StatusEntry | None) -> bool:
        """Whether writing ``entry`` would add this node to the CR's status (a new place)."""
        return (
            self.report is not None
            and cr is not None
            and entry is not None
            and self._node_name not in status_entries(cr)
        )

    def _into_cr(self, name: str, cr: KubeObject | None, entry: StatusEntry | None) -> bool:
        if self.report is None:
            return True
        if entry is None:  # a removal: of an entry we wrote, or one the CR shows
            return name in self._in_cr or self._node_name in status_entries(cr)
        if cr is None:  # not seen (the CR is gone, or no longer followed): as nri-plugins
            return True
        return belongs_in_cr(cr, self._node_name, entry)

    async def _patch(self, name: str, entry: StatusEntry | None) -> None:
        patch = status_patch(self._node_name, entry)
        await self._client.patch(self._resource, name, patch, self._namespace, subresource="status")
        self.writes += 1
