"""Following the objects that decide this node's configuration: three resilient watches.

- the Node, for its group label;
- the CR ``node.<NODE_NAME>``;
- the CR ``group.<G>`` (or ``default``), re-targeted when the Node's group label changes.

The tracker only keeps the latest state of each and wakes its consumer on every change; the
consumer asks ``selection()`` which CR is in force. Until every watch has delivered its
first full state (and again briefly after a re-target) the answer is "not known yet", so a
half-known state never looks like "no configuration".
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import attrs
import trio

from nri_resmgr.agent.selection import (
    GroupChoice,
    choose_group,
    effective_cr,
    labels_of,
    node_cr_name,
    warn_deprecated,
)
from nri_resmgr.backoff import Backoff
from nri_resmgr.errors import Fatal
from nri_resmgr.kube.client import KubeClient, KubeObject
from nri_resmgr.kube.errors import ApiError
from nri_resmgr.kube.resources import NODES, ApiResource
from nri_resmgr.kube.watch import EventType, WatchEvent

log = logging.getLogger(__name__)

BackoffFactory = Callable[[], Backoff]


def default_backoff() -> Backoff:
    return Backoff(initial=0.2, maximum=30.0)


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
        self._group: GroupChoice | None = None
        self._objects: dict[str, KubeObject | None] = {}
        self._group_known = trio.Event()
        self._group_scope: trio.CancelScope | None = None
        self._changed = trio.Event()

    async def run(self) -> None:
        """Follows all three until cancelled; a watch error retrying cannot cure is Fatal."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._follow_node)
            nursery.start_soon(self._follow_cr, self.node_cr_name)
            nursery.start_soon(self._follow_group)

    def selection(self) -> Selection | None:
        """The CR in force, or None while some watch has not delivered its state yet."""
        group = self._group
        if group is None:
            return None
        if self.node_cr_name not in self._objects or group.cr_name not in self._objects:
            return None
        return Selection(effective_cr(self._objects[self.node_cr_name],
                                      self._objects[group.cr_name]), group)  # fmt: skip

    async def wait_changed(self) -> None:
        await self._changed.wait()
        self._changed = trio.Event()

    def _notify(self) -> None:
        self._changed.set()

    async def _follow_node(self) -> None:
        await self._follow(NODES, None, self._node_name, self._on_node)

    async def _follow_cr(self, name: str) -> None:
        def store(obj: KubeObject | None) -> None:
            if name in self._wanted():
                self._objects[name] = obj
                self._notify()

        await self._follow(self._resource, self._namespace, name, store)

    async def _follow_group(self) -> None:
        await self._group_known.wait()
        while True:
            assert self._group is not None
            with trio.CancelScope() as scope:
                self._group_scope = scope
                await self._follow_cr(self._group.cr_name)

    def _wanted(self) -> set[str]:
        return {self.node_cr_name} | ({self._group.cr_name} if self._group else set())

    def _on_node(self, node: KubeObject | None) -> None:
        if node is None and not self._group_known.is_set():
            log.warning("node %s not found: no group label to select a config by", self._node_name)
        choice = choose_group(labels_of(node), self._group_label)
        old, self._group = self._group, choice
        if old != choice:
            warn_deprecated(choice, self._group_label)
            log.info("node %s: group %s, config CR %s/%s unless %s exists", self._node_name,
                     choice.group or "(none)", self._namespace, choice.cr_name,
                     self.node_cr_name)  # fmt: skip
        if old is not None and old.cr_name != choice.cr_name:
            # Forget the old target's state and restart its watch on the new name.
            self._objects.pop(old.cr_name, None)
            if self._group_scope is not None:
                self._group_scope.cancel()
        self._group_known.set()
        self._notify()

    async def _follow(
        self,
        resource: ApiResource,
        namespace: str | None,
        name: str,
        store: Callable[[KubeObject | None], None],
    ) -> None:
        current: KubeObject | None = None
        watch = self._client.watch(resource, namespace, name=name, backoff=self._backoff())
        try:
            async with watch:
                async for event in watch:
                    current = object_after(current, event)
                    store(current)
        except ApiError as exc:  # a Watch only lets through what retrying cannot cure
            where = f"{namespace}/" if namespace else ""
            raise Fatal(f"watching {resource.plural} {where}{name}: {exc}") from exc
