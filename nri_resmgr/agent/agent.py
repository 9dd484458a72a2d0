"""The cluster config agent: this node's policy configuration from the config CRs.

Two phases, one object:
- ``initial_config(build)`` waits for the first CR in force, loads it and hands it to
  ``build`` (which makes the policy and the manager). If either refuses it, the Failure is
  reported and the ConfigError re-raised: the daemon cannot start.
- As a daemon service it then follows the CRs and applies each new (UID, generation) with
  the manager's ``reconfigure``. A config that fails to load or that the manager/policy
  refuses is rejected and the one in force stays. Every outcome is reported on the CR in
  force, under ``status.nodes.<node>`` or as an Event (``status``); when another CR takes
  over, the old CR's entry is removed, and on a clean stop so is the current one.

Inside ``async with agent.following():`` both phases read the same two watches (the daemon
does this: start-up then costs each node two watch requests, not four); without it, each
phase opens its own.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar

import trio

from nri_resmgr.agent.report import EventReporter, NodeReporter
from nri_resmgr.agent.selection import ConfigKey, kind_for_policy, name_of
from nri_resmgr.agent.status import StatusWriter, failure_entry, success_entry
from nri_resmgr.agent.tracker import BackoffFactory, ConfigTracker, Selection
from nri_resmgr.config.documents import load_document
from nri_resmgr.config.models import PolicyDocument, PolicySpec
from nri_resmgr.errors import ConfigError
from nri_resmgr.kube.client import KubeClient, KubeObject
from nri_resmgr.kube.resources import CONFIG_RESOURCES_BY_KIND
from nri_resmgr.kube.watch import default_backoff
from nri_resmgr.shorten import shorten

log = logging.getLogger(__name__)

T = TypeVar("T")
Reconfigure = Callable[[PolicySpec], Awaitable[object]]

# How long a last status write (a fatal Failure, or clearing the entry on stop) may take.
FINAL_WRITE_TIMEOUT = 5.0
# A config with thousands of bad keys logs the first ones and a count, not thousands of lines.
MAX_LOGGED_ERRORS = 20


class ConfigAgent:
    name = "config-agent"

    def __init__(
        self,
        client: KubeClient,
        *,
        namespace: str,
        node_name: str,
        policy_name: str,
        group_label: str = "config.nri/group",
        backoff: BackoffFactory = default_backoff,
        final_write_timeout: float = FINAL_WRITE_TIMEOUT,
    ) -> None:
        self.kind = kind_for_policy(policy_name)
        self.resource = CONFIG_RESOURCES_BY_KIND[self.kind]
        self.namespace = namespace
        self.node_name = node_name
        self.group_label = group_label
        self.final_write_timeout = final_write_timeout
        self._client = client
        self._backoff = backoff
        self._tracker: ConfigTracker | None = None  # the shared one, inside following()
        self.events = EventReporter(client, self.resource, namespace, node_name)
        self.status = StatusWriter(client, self.resource, namespace, node_name, backoff(),
                                   current=self._current_cr, report=self.events.report)  # fmt: skip
        self.doc: PolicyDocument | None = None  # the configuration in force
        self.cr_in_force: str | None = None  # the CR carrying this node's status entry
        self.applied = 0
        self.rejected = 0
        self.last_errors: list[str] = []
        self._seen: ConfigKey | None = None
        self._reported_none = False
        self._reconfigure: Reconfigure | None = None
        self._scope: trio.CancelScope | None = None
        self._done = trio.Event()
        self._stopping = False

    # -- following the cluster ------------------------------------------------------------

    @asynccontextmanager
    async def following(self) -> AsyncIterator[None]:
        """Keeps the watches open for the block: both phases (and a restart of ``serve``)
        read them instead of opening their own."""
        tracker = self._new_tracker()
        with _unwrapped():  # what the block raises comes out as itself, not in a group
            async with trio.open_nursery() as nursery:
                nursery.start_soon(tracker.run)
                self._tracker = tracker
                try:
                    yield
                finally:
                    self._tracker = None
                    nursery.cancel_scope.cancel(reason="config agent stops following")

    @asynccontextmanager
    async def _tracking(self) -> AsyncIterator[ConfigTracker]:
        if self._tracker is not None:
            yield self._tracker
            return
        async with self.following():
            assert self._tracker is not None
            yield self._tracker

    def report_via(self, reporter: NodeReporter) -> None:
        """Where this node's own report goes (``nri_resmgr.app``: its NodeResourceTopology
        while that is exported, else an Event); an Event by default."""
        self.status.report = reporter

    def node(self) -> KubeObject | None:
        """This node's Node object as last seen (None: not followed now, or not known)."""
        return self._tracker.node if self._tracker is not None else None

    def _current_cr(self, name: str) -> KubeObject | None:
        return self._tracker.cr(name) if self._tracker is not None else None

    # -- phase 1: the configuration the daemon starts with ---------------------------------

    async def initial_config(self, build: Callable[[PolicyDocument], T]) -> T:
        """Waits for the first CR in force and returns ``build(doc)``; ConfigError is fatal."""
        result: list[T] = []
        with _unwrapped():
            async with self._tracking() as tracker:
                error = await self._first_config(tracker, build, result)
                if error is not None:
                    # Reported while the watches are open: the report's place depends on
                    # the CR as seen.
                    with trio.move_on_after(self.final_write_timeout):
                        await self.status.flush()
        if error is not None:
            raise error
        return result[0]

    async def _first_config(
        self, tracker: ConfigTracker, build: Callable[[PolicyDocument], T], result: list[T]
    ) -> ConfigError | None:
        cr = await self._next_new_cr(tracker)

        def build_into(doc: PolicyDocument) -> None:
            result.append(build(doc))

        return await self._apply(cr, _awaitable(build_into))

    # -- phase 2: the daemon service --------------------------------------------------------

    def attach(self, reconfigure: Reconfigure) -> None:
        """Where later configurations go: normally ``ResourceManager.reconfigure``."""
        self._reconfigure = reconfigure

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        if self._reconfigure is None:
            raise RuntimeError("ConfigAgent.serve: attach() a reconfigure function first")
        try:
            with trio.CancelScope() as self._scope, _unwrapped():
                if self._stopping:
                    task_status.started()
                    return
                async with self._tracking() as tracker, trio.open_nursery() as nursery:
                    nursery.start_soon(self._report, tracker)
                    task_status.started()
                    await self._follow(tracker, self._reconfigure)
        finally:
            self._done.set()

    async def _report(self, tracker: ConfigTracker) -> None:
        # Where a result goes depends on the CR as seen: wait until it is.
        await tracker.known.wait()
        await self.status.run()

    async def stop(self) -> None:
        """Stops following and removes this node's entry from the CR in force."""
        if self._stopping:
            return
        self._stopping = True
        if self._scope is not None:
            self._scope.cancel(reason="config agent stopping")
            await self._done.wait()
        if self.cr_in_force is not None:
            self.status.set(self.cr_in_force, None)
            with trio.move_on_after(self.final_write_timeout) as timeout:
                await self.status.flush()
            if timeout.cancelled_caught:
                log.warning("could not clear the status of node %s in config %s/%s",
                            self.node_name, self.namespace, self.cr_in_force)  # fmt: skip
            self.cr_in_force = None

    async def _follow(self, tracker: ConfigTracker, reconfigure: Reconfigure) -> None:
        async def apply(doc: PolicyDocument) -> None:
            await reconfigure(doc.spec)

        while True:
            cr = await self._next_new_cr(tracker)
            error = await self._apply(cr, apply)
            lines = error.errors if error else []
            for line in lines[:MAX_LOGGED_ERRORS]:
                log.error("config %s rejected, the previous configuration stays: %s",
                          self._describe(cr), line)  # fmt: skip
            if len(lines) > MAX_LOGGED_ERRORS:
                log.error("config %s: %d more problems not shown", self._describe(cr),
                          len(lines) - MAX_LOGGED_ERRORS)  # fmt: skip

    # -- shared -----------------------------------------------------------------------------

    async def _next_new_cr(self, tracker: ConfigTracker) -> KubeObject:
        """Waits until the CR in force is one (UID, generation) not handled yet."""
        while True:
            await tracker.wait_changed()
            selection = tracker.selection()
            if selection is not None and self._is_new(selection):
                assert selection.cr is not None
                return selection.cr

    def _new_tracker(self) -> ConfigTracker:
        return ConfigTracker(self._client, self.resource, self.namespace, self.node_name,
                             self.group_label, self._backoff)  # fmt: skip

    def _is_new(self, selection: Selection) -> bool:
        """Whether the selection needs applying; moves the status entry when the CR changes."""
        if selection.cr is None:
            self._no_config(selection)
            return False
        self._reported_none = False
        key = ConfigKey.of(selection.cr)
        if key == self._seen:
            return False
        name = name_of(selection.cr)
        if self.cr_in_force is not None and self.cr_in_force != name:
            log.info("node %s: config %s/%s now in force instead of %s", self.node_name,
                     self.namespace, name, self.cr_in_force)  # fmt: skip
            self.status.set(self.cr_in_force, None)
        self.cr_in_force = name
        self._seen = key
        return True

    def _no_config(self, selection: Selection) -> None:
        if self.cr_in_force is not None:
            self.status.set(self.cr_in_force, None)
            self.cr_in_force = None
        self._seen = None  # the same CR coming back into force is applied (and reported) again
        if not self._reported_none:
            self._reported_none = True
            log.warning("no effective configuration: none of %s %s/node.%s, %s exists; %s",
                        self.kind, self.namespace, self.node_name, selection.group.cr_name,
                        "waiting" if self.doc is None else "keeping the one in force")  # fmt: skip

    async def _apply(
        self, cr: KubeObject, apply: Callable[[PolicyDocument], Awaitable[None]]
    ) -> ConfigError | None:
        name, generation = name_of(cr), ConfigKey.of(cr).generation
        try:
            doc = _load(cr)
            await apply(doc)
        except ConfigError as exc:
            self.rejected += 1
            self.last_errors = list(exc.errors)
            self.status.set(name, failure_entry(generation, exc.errors))
            return exc
        self.doc = doc
        self.applied += 1
        self.last_errors = []
        self.status.set(name, success_entry(generation))
        log.info("config %s applied", self._describe(cr))
        return None

    def _describe(self, cr: KubeObject) -> str:
        generation = ConfigKey.of(cr).generation
        return f"{self.kind} {self.namespace}/{name_of(cr)} generation {generation}"


def _load(cr: KubeObject) -> PolicyDocument:
    """``load_document``, with any failure of it a rejected configuration.

    The CR comes from the cluster and reaches every node that selects it: a loader bug it
    triggers must reject that one configuration, not end every daemon (again on each restart).
    """
    try:
        return load_document(cr)
    except ConfigError:
        raise
    except Exception as exc:
        log.exception("loading config %s failed unexpectedly", name_of(cr))
        raise ConfigError(f"config could not be loaded: {type(exc).__name__}: "
                          f"{shorten(str(exc), 200)}") from exc  # fmt: skip


def _awaitable(fn: Callable[[PolicyDocument], None]) -> Callable[[PolicyDocument], Awaitable[None]]:
    async def call(doc: PolicyDocument) -> None:
        fn(doc)

    return call


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


@contextmanager
def _unwrapped() -> Iterator[None]:
    """Re-raises a nursery's lone failure as itself, so callers can catch Fatal/ConfigError."""
    try:
        yield
    except BaseExceptionGroup as group:
        leaves = _leaves(group)
        if len(leaves) == 1 and not isinstance(leaves[0], trio.Cancelled):
            raise leaves[0] from None
        raise
