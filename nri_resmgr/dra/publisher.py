"""Publishes this node's ResourceSlice and keeps it that way.

The publisher is a trio task that reconciles: it finds the slices of this driver on this node
(field selectors ``spec.nodeName`` and ``spec.driver``), keeps the one of our pool with the
newest generation, deletes the rest, and creates or replaces (full PUT) the kept one so it
matches what the policy offers. Any change we write bumps the pool generation.

It syncs at start, when ``trigger()`` is called (devices changed, kubelet re-registered us),
when its watch on its own slices sees a change it did not make, and every
``resync_interval`` seconds: kubelet deletes a node's slices when it starts and when a driver
stays unregistered for 30 s; the watch repairs that in one round trip, the periodic re-list
covers a watch that is down. API failures (5xx, 409, timeouts, anything) are
``Recoverable``: logged and retried with backoff, never allowed to end the daemon.

The Kubernetes client (``nri_resmgr.kube.KubeClient``) is consumed through the ``KubeApi``
protocol below, the part of its API we use, so fast tests can pass an in-process fake.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import trio

from nri_resmgr.backoff import Backoff
from nri_resmgr.dra.slice_spec import (
    RESOURCE_GROUP,
    SLICE_API_VERSIONS,
    DesiredSlice,
    SliceOwner,
    object_name,
    pool_generation,
    split_pool,
)
from nri_resmgr.errors import Recoverable
from nri_resmgr.kube import ApiResource, KubeClient, KubeObject, NotFound, ObjectList
from nri_resmgr.kube.resources import NODES
from nri_resmgr.kube.watch import EventType, Watch, WatchEvent
from nri_resmgr.resmgr.model import Device

log = logging.getLogger(__name__)

DEFAULT_RESYNC_INTERVAL = 30.0
DEFAULT_SYNC_TIMEOUT = 20.0
OWN_VERSIONS_KEPT = 64
WATCH_RETRY = 1.0


class KubeApi(Protocol):
    """The subset of ``nri_resmgr.kube.KubeClient`` the publisher uses (tests pass a fake)."""

    async def get(
        self,
        resource: ApiResource,
        name: str,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> KubeObject: ...

    async def list(
        self,
        resource: ApiResource,
        namespace: str | None = None,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
    ) -> ObjectList: ...

    async def create(
        self, resource: ApiResource, obj: KubeObject, namespace: str | None = None
    ) -> KubeObject: ...

    async def replace(
        self,
        resource: ApiResource,
        obj: KubeObject,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> KubeObject: ...

    async def delete(
        self,
        resource: ApiResource,
        name: str,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        propagation_policy: str | None = None,
    ) -> KubeObject: ...


@runtime_checkable
class WatchApi(Protocol):
    """Watching, when the client has it (the real one does; fast-test fakes need not)."""

    def watch(
        self, resource: ApiResource, namespace: str | None = None, *, field_selector: str | None
    ) -> Watch: ...


def _client_satisfies_protocol(client: KubeClient) -> KubeApi:
    return client  # mypy proves the real client fits KubeApi


def resource_slices(version: str) -> ApiResource:
    return ApiResource(RESOURCE_GROUP, version, "resourceslices", False, kind="ResourceSlice")


DeviceSource = Callable[[], Awaitable[list[Device]]]


class SlicePublisher:
    def __init__(
        self,
        kube: KubeApi,
        devices: DeviceSource,
        driver: str,
        node_name: str,
        *,
        pool_name: str | None = None,
        resync_interval: float = DEFAULT_RESYNC_INTERVAL,
        sync_timeout: float = DEFAULT_SYNC_TIMEOUT,
        backoff: Backoff | None = None,
    ) -> None:
        if not node_name:
            raise ValueError("ResourceSlice publisher: node_name must not be empty")
        self.kube = kube
        self.devices = devices
        self.driver = driver
        self.node_name = node_name
        self.pool_name = pool_name or node_name
        self.resync_interval = resync_interval
        self.sync_timeout = sync_timeout
        self.backoff = backoff or Backoff(initial=1.0, maximum=60.0)
        self.syncs = 0
        self.failures = 0
        self.last_error: str | None = None
        self._versions = list(SLICE_API_VERSIONS)
        self._wake = trio.Event()
        self._own_versions: list[str] = []
        self.watch_events = 0
        """Watch events that asked for a sync (a slice changed or vanished behind our back)."""

    @property
    def _selector(self) -> str:
        return f"spec.nodeName={self.node_name},spec.driver={self.driver}"

    @property
    def api_version(self) -> str:
        return self._versions[0]

    def trigger(self) -> None:
        """Ask for a sync soon (callable from any trio task, or a trio-asyncio callback)."""
        self._wake.set()

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            if isinstance(self.kube, WatchApi):
                nursery.start_soon(self._watch_own, self.kube)
            task_status.started()
            while True:
                if await self._sync_with_retry():
                    await self._wait_for_trigger(self.resync_interval)

    async def _watch_own(self, kube: WatchApi) -> None:
        """Sync as soon as one of our slices changes or vanishes behind our back (kubelet
        wipes a node's slices when it starts): repaired in one round trip, not a resync.
        Events of our own writes (their resourceVersions) are ignored."""
        while True:
            try:
                watch = kube.watch(resource_slices(self.api_version), field_selector=self._selector)
                async with watch:
                    async for event in watch:
                        if self._foreign(event):
                            self.watch_events += 1
                            self.trigger()
            except Exception as e:
                log.warning("watching own ResourceSlices failed, retrying: %s", describe(e))
            await trio.sleep(WATCH_RETRY)

    def _foreign(self, event: WatchEvent) -> bool:
        if event.type is EventType.RESET:
            return True  # a (re)list: changes during a gap in the watch are not reported
        version = str(((event.object or {}).get("metadata") or {}).get("resourceVersion") or "")
        return event.type is EventType.DELETED or version not in self._own_versions

    async def _sync_with_retry(self) -> bool:
        try:
            with trio.fail_after(self.sync_timeout):
                await self.sync_once()
        except Exception as e:
            self.failures += 1
            self.last_error = describe(e)
            delay = self.backoff.next_delay()
            log.warning(
                "publishing ResourceSlice for %s failed (attempt %d), retrying in %.1fs: %s",
                self.driver,
                self.backoff.attempts,
                delay,
                self.last_error,
            )
            await self._wait_for_trigger(delay)
            return False
        self.backoff.reset()
        self.syncs += 1
        self.last_error = None
        return True

    async def _wait_for_trigger(self, timeout: float) -> None:
        with trio.move_on_after(timeout):
            await self._wake.wait()
        self._wake = trio.Event()

    async def sync_once(self) -> None:
        """One reconciliation pass; raises on any API failure."""
        desired = DesiredSlice(
            driver=self.driver,
            node_name=self.node_name,
            pool_name=self.pool_name,
            devices=tuple(await self.devices()),
            owner=await self._owner(),
        )
        slices = await self._list_own()
        ours, others = split_pool(slices, self.pool_name)
        for obj in others:
            await self._delete(obj)
        if desired.pool_matches(ours, self.api_version):
            return
        # Every slice of the pool is rewritten with the next generation: the scheduler only
        # counts the newest generation, and only once all its slices are there.
        generation = max((pool_generation(s) + 1 for s in ours or slices), default=0)
        resource = resource_slices(self.api_version)
        for index in range(desired.slice_count):
            written = None
            if index < len(ours):
                body = desired.updated_object(ours[index], self.api_version, generation, index)
                with contextlib.suppress(NotFound):  # deleted since the list (a wipe): create
                    written = await self.kube.replace(resource, body)
                verb = "updated"
            if written is None:
                body = desired.new_object(self.api_version, generation, index)
                written = await self.kube.create(resource, body)
                verb = "created"
            self._written(written)
            log.info("%s ResourceSlice %s (generation %d, slice %d of %d)", verb,
                     object_name(written), generation, index + 1, desired.slice_count)  # fmt: skip
        for obj in ours[desired.slice_count :]:
            await self._delete(obj)

    def _written(self, obj: Mapping[str, Any]) -> None:
        """Remember our own write, so that its watch event does not trigger a sync."""
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        if version:
            self._own_versions.append(version)
            del self._own_versions[:-OWN_VERSIONS_KEPT]

    async def _owner(self) -> SliceOwner:
        # Fetched each sync: a re-created Node has a new UID, and the slice must follow it.
        node = await self.kube.get(NODES, self.node_name)
        uid = str(((node or {}).get("metadata") or {}).get("uid") or "")
        if not uid:
            raise Recoverable(f"Node {self.node_name} has no metadata.uid")
        return SliceOwner(self.node_name, uid)

    async def _list_own(self) -> list[Mapping[str, Any]]:
        while True:
            try:
                result = await self.kube.list(
                    resource_slices(self.api_version), field_selector=self._selector
                )
            except NotFound:
                self._next_version()
                continue
            return list(result.items)

    def _next_version(self) -> None:
        gone = self._versions.pop(0)
        if not self._versions:
            self._versions = list(SLICE_API_VERSIONS)
            raise Recoverable(
                f"API server serves no ResourceSlice version of {', '.join(SLICE_API_VERSIONS)} "
                "(is DRA enabled on the cluster?)"
            )
        log.info(
            "ResourceSlice API %s/%s not served, trying %s", RESOURCE_GROUP, gone, self.api_version
        )

    async def _delete(self, obj: Mapping[str, Any]) -> None:
        name = object_name(obj)
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "") or None
        # The precondition keeps us from deleting a slice someone re-created meanwhile.
        with contextlib.suppress(NotFound):
            await self.kube.delete(
                resource_slices(self.api_version), name, resource_version=version
            )
        log.info("deleted extra ResourceSlice %s", name)


def describe(error: BaseException) -> str:
    if isinstance(error, trio.TooSlowError):
        return "API server did not answer in time"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
