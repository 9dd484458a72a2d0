"""``FakeKube`` with a watch: every change to a ResourceSlice becomes an event on the open
watches whose field selector it matches, the way the API server streams them.

As ``nri_resmgr.kube.watch.Watch`` does without a starting resourceVersion, a watch first
yields one RESET holding the current objects, then ADDED/MODIFIED/DELETED. A DELETED event
carries a new resourceVersion (the deletion's), as the API server's do. Each watch counts
the events it sent and how many the consumer asked for, so a test can wait until every
event was handled (``handled_all``) instead of sleeping.
"""

from __future__ import annotations

import copy
import math
from types import TracebackType
from typing import Any

import trio

from nri_resmgr.kube import ApiResource, KubeObject, NotFound
from nri_resmgr.kube.watch import EventType, WatchEvent
from tests.dra.fake_kube import FakeKube, matches, parse_selector


class FakeWatch:
    def __init__(self, kube: WatchedKube, resource: ApiResource, field_selector: str | None):
        self.resource = resource
        self.field_selector = field_selector
        self.opened_at = trio.current_time()
        self.closed = False
        self.sent = 0
        self.asked = 0
        self.kinds: list[EventType] = []
        self._wanted = parse_selector(field_selector or "")
        self._send, self._receive = trio.open_memory_channel[WatchEvent](math.inf)
        self._reset = tuple(
            copy.deepcopy(o) for o in kube.slices.values() if matches(o, self._wanted)
        )

    @property
    def handled_all(self) -> bool:
        """The consumer has dealt with every event sent and is waiting for the next one."""
        return self.asked > self.sent

    def offer(self, kind: EventType, obj: KubeObject) -> None:
        if not self.closed and matches(obj, self._wanted):
            self.sent += 1
            self.kinds.append(kind)
            self._send.send_nowait(WatchEvent(kind, copy.deepcopy(obj), ""))

    async def __aenter__(self) -> FakeWatch:
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.closed = True

    def __aiter__(self) -> FakeWatch:
        return self

    async def __anext__(self) -> WatchEvent:
        self.asked += 1
        if self.asked == 1:
            self.sent += 1
            self.kinds.append(EventType.RESET)
            return WatchEvent(EventType.RESET, None, "", self._reset)
        return await self._receive.receive()


class WatchedKube(FakeKube):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.watches: list[FakeWatch] = []
        self.watch_errors: list[Exception] = []
        """Raised, in order, by the next calls of ``watch``."""

    def watch(
        self, resource: ApiResource, namespace: str | None = None, *, field_selector: str | None
    ) -> FakeWatch:
        if self.watch_errors:
            raise self.watch_errors.pop(0)
        if resource.version not in self.served:
            raise NotFound(404, "NotFound", f"the server could not find {resource.version}")
        watch = FakeWatch(self, resource, field_selector)
        self.watches.append(watch)
        return watch

    @property
    def current_watch(self) -> FakeWatch:
        return self.watches[-1]

    def _emit(self, kind: EventType, obj: KubeObject) -> None:
        for watch in self.watches:
            watch.offer(kind, obj)

    async def create(
        self, resource: ApiResource, obj: KubeObject, namespace: str | None = None
    ) -> KubeObject:
        written = await super().create(resource, obj, namespace)
        self._emit(EventType.ADDED, written)
        return written

    async def replace(
        self, resource: ApiResource, obj: KubeObject, namespace: str | None = None, *,
        subresource: str | None = None,
    ) -> KubeObject:  # fmt: skip
        written = await super().replace(resource, obj, namespace, subresource=subresource)
        self._emit(EventType.MODIFIED, written)
        return written

    async def delete(
        self, resource: ApiResource, name: str, namespace: str | None = None, *,
        resource_version: str | None = None, propagation_policy: str | None = None,
    ) -> KubeObject:  # fmt: skip
        gone = await super().delete(resource, name, namespace, resource_version=resource_version)
        self._deleted(gone)
        return gone

    def _deleted(self, obj: KubeObject) -> None:
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(next(self._ids))
        self._emit(EventType.DELETED, obj)

    # -- changes made by others -----------------------------------------------------------

    def edit_behind_our_back(self, name: str, **spec: Any) -> None:
        super().edit_behind_our_back(name, **spec)
        self._emit(EventType.MODIFIED, self.slices[name])

    def wipe(self, driver: str) -> None:
        """Delete every slice of ``driver``, as kubelet does when it starts."""
        for obj in self.by_driver(driver):
            self._deleted(self.slices.pop(obj["metadata"]["name"]))
