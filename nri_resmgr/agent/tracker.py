"""Following the objects that decide this node's configuration: two resilient watches.

- the Node, for its group label (and its UID, which the DRA publisher's slices are owned by);
- every config CR of the policy's kind in the config namespace: ``node.<NODE_NAME>``,
  ``group.<G>`` and ``default`` are among them, so a change of the group label needs no new
  watch, only another look.

One watch on the namespace instead of one per name costs each node the other CRs of the
namespace (a handful: ``default`` and the groups; per-node CRs are meant for exceptions)
and saves a watch per node, and the re-targeting when the label changes.

The tracker only keeps the latest state and wakes its consumer on every change; the consumer
asks ``selection()`` which CR is in force. Until both watches have delivered their first
full state the answer is "not known yet", so a half-known state never looks like "no
configuration". A watch error retrying cannot cure is kept as ``failure`` (and raised by
``wait_changed``) rather than raised from ``run``: the consumer decides what it ends.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import attrs
import trio

from nri_resmgr.agent.selection import (
    GroupChoice,
    choose_group,
    effective_cr,
    labels_of,
    name_of,
    node_cr_name,
    warn_deprecated,
)
from nri_resmgr.backoff import Backoff
from nri_resmgr.errors import Fatal
from nri_resmgr.kube.client import KubeClient, KubeObject
from nri_resmgr.kube.errors import ApiError
from nri_resmgr.kube.resources import NODES, ApiResource
from nri_resmgr.kube.watch import EventType, WatchEvent, default_backoff

log = logging.getLogger(__name__)

BackoffFactory = Callable[[], Backoff]


@attrs.frozen
class Selection:
    """The CR in force (None: no config CR applies to this node) and where it was chosen."""

    cr: KubeObject | None
    group: GroupChoice


def object_after(current: KubeObject | None, event: WatchEvent) -> KubeObject | None:
    """The watched object's state after ``event`` (a watch by name sees at most one)."""
    if event.type is EventType.RESET:
        return event.objects[0] if event.objects else None
    if event.type is EventType.DELETED:
        return None
    return event.object


Objects = dict[str, KubeObject]


def objects_after(current: Objects | None, event: WatchEvent) -> Objects:
    """The watched objects by name after ``event`` (``current`` is updated in place)."""
    if event.type is EventType.RESET:
        return {name_of(obj): obj for obj in event.objects}
    objects = {} if current is None else current
    if event.object is not None:
        if event.type is EventType.DELETED:
            objects.pop(name_of(event.object), None)
        else:
            objects[name_of(event.object)] = event.object
    return objects


class ConfigTracker:
    def __init__(
        self,
        client: KubeClient,
        resource: ApiResource,
        namespace: str,
        node_name: str,
        group_label: str,
        backoff: BackoffFactory = default_backoff,
    ) -> None:
        self._client = client
        self._resource = resource
        self._namespace = namespace
        self._node_name = node_name
        self._group_label = group_label
        self._backoff = backoff
        self.node_cr_name = node_cr_name(node_name)
        self.node: KubeObject | None = None
        self._group: GroupChoice | None = None
        self._crs: Objects | None = None  # None: not known yet
        self._changed = trio.Event()
        self.known = trio.Event()
        """Set once both watches have delivered their state."""
        self.failure: Fatal | None = None

    async def run(self) -> None:
        """Follows both until cancelled; a watch that fails is kept in ``failure``."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._guarded, self._follow_node)
            nursery.start_soon(self._guarded, self._follow_crs)

    async def _guarded(self, follow: Callable[[], Awaitable[None]]) -> None:
        try:
            await follow()
        except Fatal as exc:
            self.failure = exc
            self._notify()

    def selection(self) -> Selection | None:
        """The CR in force, or None while some watch has not delivered its state yet."""
        group, crs = self._group, self._crs
        if group is None or crs is None:
            return None
        return Selection(effective_cr(crs.get(self.node_cr_name), crs.get(group.cr_name)), group)

    def cr(self, name: str) -> KubeObject | None:
        """The config CR ``name`` as last seen (None: none, or not known yet)."""
        return (self._crs or {}).get(name)

    async def wait_changed(self) -> None:
        """Returns after the next change; raises the watches' failure, if any."""
        if self.failure is None:
            await self._changed.wait()
            self._changed = trio.Event()
        if self.failure is not None:
            raise self.failure

    def _notify(self) -> None:
        if self._group is not None and self._crs is not None:
            self.known.set()
        self._changed.set()

    async def _follow_node(self) -> None:
        current: KubeObject | None = None
        async for event in self._events(NODES, None, self._node_name):
            current = object_after(current, event)
            self._on_node(current)

    async def _follow_crs(self) -> None:
        async for event in self._events(self._resource, self._namespace, None):
            self._crs = objects_after(self._crs, event)
            self._notify()

    def _on_node(self, node: KubeObject | None) -> None:
        if node is None and self._group is None:
            log.warning("node %s not found: no group label to select a config by", self._node_name)
        self.node = node
        choice = choose_group(labels_of(node), self._group_label)
        old, self._group = self._group, choice
        if old != choice:
            warn_deprecated(choice, self._group_label)
            log.info("node %s: group %s, config CR %s/%s unless %s exists", self._node_name,
                     choice.group or "(none)", self._namespace, choice.cr_name,
                     self.node_cr_name)  # fmt: skip
        self._notify()

    async def _events(
        self, resource: ApiResource, namespace: str | None, name: str | None
    ) -> AsyncIterator[WatchEvent]:
        watch = self._client.watch(resource, namespace, name=name, backoff=self._backoff())
        try:
            async with watch:
                async for event in watch:
                    yield event
        except ApiError as exc:  # a Watch only lets through what retrying cannot cure
            where = f"{namespace}/" if namespace else ""
            raise Fatal(f"watching {resource.plural} {where}{name or ''}: {exc}") from exc
