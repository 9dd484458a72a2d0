"""Publishes this node's ResourceSlice and keeps it that way.

The publisher is a trio task that reconciles: it knows the slices of this driver on this node
(field selectors ``spec.nodeName`` and ``spec.driver``), keeps the one of our pool with the
newest generation, deletes the rest, and creates or replaces (full PUT) the kept one so it
matches what the policy offers. Any change we write bumps the pool generation.

What it knows of its slices comes from its watch on them (the state, then every change),
kept as a cache, so a sync that finds nothing to do sends nothing. It syncs at start, when
``trigger()`` is called (devices changed, kubelet re-registered us), and when the watch sees
a change it did not make: kubelet deletes a node's slices when it starts and when a driver
stays unregistered for 30 s, and the watch repairs that in one round trip. There is no
periodic re-list: a watch resumes from its last version after a disconnect and gets the whole
state again after a 410, so it does not miss changes a re-list would find (at 5,000 nodes a
30 s re-list alone was 170 LISTs a second). A client without a watch (fast-test fakes) is
listed at each sync, and re-synced every ``resync_interval`` seconds if one is given.
API failures (5xx, 409, timeouts, anything) are ``Recoverable``: logged and retried with
backoff, never allowed to end the daemon.

The slices are owned by the Node; its UID comes from ``node`` when the daemon already
follows the Node (the config agent's watch), else from a GET at each sync that writes.

The Kubernetes client (``nri_resmgr.kube.KubeClient``) is consumed through the ``KubeApi``
protocol (``nri_resmgr.kube.api``), so fast tests can pass an in-process fake.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

from nri_resmgr.backoff import Backoff
from nri_resmgr.dra.kubeletplugin.devices import Device
from nri_resmgr.dra.kubeletplugin.slice_spec import (
    RESOURCE_GROUP,
    SLICE_API_VERSIONS,
    DesiredSlice,
    SliceOwner,
    object_name,
    pool_generation,
    split_pool,
)
from nri_resmgr.errors import Fatal, Recoverable
from nri_resmgr.kube import ApiResource, KubeObject, NotFound
from nri_resmgr.kube.api import KubeApi
from nri_resmgr.kube.resources import NODES
from nri_resmgr.kube.watch import EventType, WatchEvent

log = logging.getLogger(__name__)

DEFAULT_SYNC_TIMEOUT = 20.0
OWN_VERSIONS_KEPT = 64
WATCH_RETRY = 1.0


WatchApi = KubeApi
"""A client that can watch (the real one does; fast-test fakes need not)."""


def resource_slices(version: str) -> ApiResource:
    return ApiResource(RESOURCE_GROUP, version, "resourceslices", False, kind="ResourceSlice")


DeviceSource = Callable[[], Awaitable[list[Device]]]
NodeSource = Callable[[], KubeObject | None]
"""The Node as the daemon last saw it (None: not known)."""


class SlicePublisher:
    def __init__(
        self,
        kube: KubeApi,
        devices: DeviceSource,
        driver: str,
        node_name: str,
        *,
        pool_name: str | None = None,
        resync_interval: float | None = None,
        sync_timeout: float = DEFAULT_SYNC_TIMEOUT,
        backoff: Backoff | None = None,
        node: NodeSource | None = None,
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
        self.node = node
        self.backoff = backoff or Backoff(initial=1.0, maximum=60.0)
        self.syncs = 0
        self.failures = 0
        self.last_error: str | None = None
        self._versions = list(SLICE_API_VERSIONS)
        self._wake = trio.Event()
        self._own_versions: list[str] = []
        self._watched = isinstance(kube, WatchApi)
        self._slices: dict[str, Mapping[str, Any]] | None = None
        """Our slices by name, as the watch last told (None: its state has not come yet)."""
        self._slices_known = trio.Event()
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
        """Keeps the cache of our slices, and syncs as soon as one changes or vanishes behind
        our back (kubelet wipes a node's slices when it starts): repaired in one round trip.
        Events of our own writes (their resourceVersions) are ignored. The watch also finds
        the API version the server serves (404: the next one)."""
        while True:
            try:
                watch = kube.watch(resource_slices(self.api_version), field_selector=self._selector)
                async with watch:
                    async for event in watch:
                        self._remember(event)
                        if self._foreign(event):
                            self.watch_events += 1
                            self.trigger()
            except NotFound:
                self._slices = None
                with contextlib.suppress(Recoverable):
                    self._next_version()
                    continue  # at once: another version, not a failure
                log.warning("watching own ResourceSlices: no ResourceSlice version served")
            except Exception as e:
                log.warning("watching own ResourceSlices failed, retrying: %s", describe(e))
            await trio.sleep(WATCH_RETRY)

    def _remember(self, event: WatchEvent) -> None:
        if event.type is EventType.RESET:
            self._slices = {object_name(o): o for o in event.objects}
            self._slices_known.set()
        elif self._slices is not None and event.object is not None:
            if event.type is EventType.DELETED:
                self._slices.pop(object_name(event.object), None)
            else:
                self._slices[object_name(event.object)] = event.object

    def _foreign(self, event: WatchEvent) -> bool:
        if event.type is EventType.RESET:
            return True  # a (re)list: changes during a gap in the watch are not reported
        version = str(((event.object or {}).get("metadata") or {}).get("resourceVersion") or "")
        return event.type is EventType.DELETED or version not in self._own_versions

    async def _sync_with_retry(self) -> bool:
        try:
            with trio.fail_after(self.sync_timeout):
                await self.sync_once()
        except Fatal:
            raise
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

    async def _wait_for_trigger(self, timeout: float | None) -> None:
        with trio.move_on_after(math.inf if timeout is None else timeout):
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
            if self._slices is not None:
                self._slices[object_name(written)] = written
            _check_kept(desired.devices, written)
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
        # Fetched each sync, unless followed: a re-created Node has a new UID, and the slice
        # must follow it.
        node = self.node() if self.node else None
        if not ((node or {}).get("metadata") or {}).get("uid"):
            node = await self.kube.get(NODES, self.node_name)
        uid = str(((node or {}).get("metadata") or {}).get("uid") or "")
        if not uid:
            raise Recoverable(f"Node {self.node_name} has no metadata.uid")
        return SliceOwner(self.node_name, uid)

    async def _list_own(self) -> list[Mapping[str, Any]]:
        while self._watched and self._slices is None:  # bounded by the sync's timeout
            if self._slices_known.is_set():  # set for an API version since given up
                self._slices_known = trio.Event()
            await self._slices_known.wait()
        if self._slices is not None:
            return list(self._slices.values())
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
        if self._slices is not None:
            self._slices.pop(name, None)
        log.info("deleted extra ResourceSlice %s", name)


CONSUMABLE_CAPACITY = (
    "consumable capacity (Kubernetes feature DRAConsumableCapacity: alpha and off by default "
    "in 1.34-1.35, beta and on by default from 1.36)"
)


def _check_kept(devices: tuple[Device, ...], written: Mapping[str, Any]) -> None:
    """The API server silently drops fields of disabled features: shared devices it stored
    without ``allowMultipleAllocations`` would be allocated whole to one claim each, so the
    daemon stops (a restart with per-CPU devices, or the feature on, is the fix)."""
    shared = {d.name for d in devices if d.allow_multiple_allocations}
    if not shared:
        return
    spec = written.get("spec") or {}
    stored = [d.get("basic", d) for d in spec.get("devices") or [] if isinstance(d, dict)]
    kept = {d.get("name") for d in stored if d.get("allowMultipleAllocations")}
    dropped = sorted(shared & {d.get("name") for d in stored} - kept)
    if dropped:
        raise Fatal(
            f"the API server dropped allowMultipleAllocations from ResourceSlice devices "
            f"{', '.join(dropped)}: shared CPU devices (topology-aware's dra.cpuDeviceMode: "
            f"grouped, balloons' balloonTypes[].dra.publish) need {CONSUMABLE_CAPACITY}; "
            "enable it, or use cpuDeviceMode individual / no published balloon type"
        )


def describe(error: BaseException) -> str:
    if isinstance(error, trio.TooSlowError):
        return "API server did not answer in time"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
