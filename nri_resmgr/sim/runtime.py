"""A simulated container runtime speaking the runtime side of NRI over a unix socket.

It is the test peer of the plugin and the engine of ``nri-resmgr demo``::

    async with Simulator.listen(path, pods=[...], containers=[...]) as sim:
        plugin = await sim.wait_plugin()          # registered, configured, synchronized
        await sim.run_pod_sandbox(pod)
        rsp = await sim.create_container(pod, ctr)  # rsp.adjust is what the plugin asked for

The simulator keeps the pods and containers it was told about, applies the adjustments and
updates plugins send, and hands that state to every newly connected plugin in Synchronize.
With one plugin connected (the usual case) each relay returns that plugin's answer; with
several, they are called in index order and the last answer is returned (no merging).
"""

from __future__ import annotations

import logging
import math
import os
import socket
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager, suppress
from typing import TypeVar

import attrs
import betterproto
import trio

from nri_resmgr._gen.nri.pkg.api import v1alpha1 as api
from nri_resmgr.nri import convert
from nri_resmgr.resmgr.model import Resources
from nri_resmgr.sim.connection import SimConfig, SimPlugin

log = logging.getLogger(__name__)

Rsp = TypeVar("Rsp", bound=betterproto.Message)
Event = api.Event


class Simulator:
    def __init__(
        self,
        listener: trio.SocketListener,
        config: SimConfig,
        pods: Iterable[api.PodSandbox],
        containers: Iterable[api.Container],
    ) -> None:
        self.config = config
        self._listener = listener
        self.pods: dict[str, api.PodSandbox] = {p.id: p for p in pods}
        self.containers: dict[str, api.Container] = {c.id: c for c in containers}
        self.plugins: list[SimPlugin] = []
        self._creating: dict[str, list[api.ContainerUpdate]] = {}
        """Containers whose CreateContainer is in flight, with the updates for them that
        arrived first (in another reply): those were decided after the creation, so they
        apply after its adjustment. A runtime dispatches one event at a time; the
        simulator lets several be in flight, and their replies may be taken in any order."""
        self._ready_in, self._ready_out = trio.open_memory_channel[SimPlugin](math.inf)
        self._updates_in, self._updates_out = trio.open_memory_channel[list[api.ContainerUpdate]](
            math.inf
        )

    @classmethod
    @asynccontextmanager
    async def listen(
        cls,
        path: str,
        config: SimConfig | None = None,
        *,
        pods: Iterable[api.PodSandbox] = (),
        containers: Iterable[api.Container] = (),
    ) -> AsyncIterator[Simulator]:
        listener = await _unix_listener(path)
        sim = cls(listener, config or SimConfig(), pods, containers)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sim._accept_loop, nursery)
                yield sim
                nursery.cancel_scope.cancel(reason="simulated runtime closing")
        finally:
            with trio.CancelScope(shield=True):
                await listener.aclose()
            _unlink(path)

    async def _accept_loop(self, nursery: trio.Nursery) -> None:
        while True:
            stream = await self._listener.accept()
            plugin = SimPlugin(stream, self.config, self._apply_updates)
            nursery.start_soon(plugin.run, self._snapshot, self._on_ready)

    def _snapshot(self) -> tuple[list[api.PodSandbox], list[api.Container]]:
        return list(self.pods.values()), list(self.containers.values())

    def _on_ready(self, plugin: SimPlugin) -> None:
        self.plugins.append(plugin)
        self.plugins.sort(key=lambda p: p.index)
        self._ready_in.send_nowait(plugin)

    async def wait_plugin(self) -> SimPlugin:
        """The next plugin that finished its handshake (registration, Configure, sync)."""
        return await self._ready_out.receive()

    async def next_update(self) -> list[api.ContainerUpdate]:
        """The next batch of updates a plugin sent (UpdateContainers or sync replies)."""
        return await self._updates_out.receive()

    def active_plugins(self) -> list[SimPlugin]:
        self.plugins = [p for p in self.plugins if not p.closed.is_set()]
        return list(self.plugins)

    def _apply_updates(self, updates: list[api.ContainerUpdate]) -> list[api.ContainerUpdate]:
        failed = []
        for update in updates:
            ctr = self.containers.get(update.container_id)
            if ctr is None and update.container_id in self._creating:
                self._creating[update.container_id].append(update)
                continue
            if ctr is None:
                if not update.ignore_failure:
                    failed.append(update)
                continue
            _apply_resources(ctr, update.linux.resources)
        if updates:
            self._updates_in.send_nowait(updates)
        return failed

    async def _relay(
        self,
        event: api.Event,
        method: str,
        req: betterproto.Message,
        rsp_type: type[Rsp],
        pod: api.PodSandbox,
        container: api.Container | None = None,
    ) -> Rsp:
        answer = rsp_type()
        for plugin in self.active_plugins():
            rsp = await plugin.deliver(event, method, req, rsp_type, pod, container)
            if rsp is not None:
                answer = rsp
        return answer

    # -- pods -------------------------------------------------------------------------------

    async def run_pod_sandbox(self, pod: api.PodSandbox) -> None:
        self.pods[pod.id] = pod
        req = api.RunPodSandboxRequest(pod=pod)
        await self._relay(
            Event.RUN_POD_SANDBOX, "RunPodSandbox", req, api.RunPodSandboxResponse, pod
        )

    async def update_pod_sandbox(
        self, pod: api.PodSandbox, resources: api.LinuxResources | None = None
    ) -> None:
        self.pods[pod.id] = pod
        req = api.UpdatePodSandboxRequest(pod=pod)
        if resources is not None:
            req.linux_resources = resources
        rsp_type = api.UpdatePodSandboxResponse
        await self._relay(Event.UPDATE_POD_SANDBOX, "UpdatePodSandbox", req, rsp_type, pod)

    async def stop_pod_sandbox(self, pod: api.PodSandbox) -> None:
        req = api.StopPodSandboxRequest(pod=pod)
        rsp_type = api.StopPodSandboxResponse
        await self._relay(Event.STOP_POD_SANDBOX, "StopPodSandbox", req, rsp_type, pod)

    async def remove_pod_sandbox(self, pod: api.PodSandbox) -> None:
        self.pods.pop(pod.id, None)
        req = api.RemovePodSandboxRequest(pod=pod)
        rsp_type = api.RemovePodSandboxResponse
        await self._relay(Event.REMOVE_POD_SANDBOX, "RemovePodSandbox", req, rsp_type, pod)

    # -- containers -------------------------------------------------------------------------

    async def create_container(
        self, pod: api.PodSandbox, ctr: api.Container
    ) -> api.CreateContainerResponse:
        """Create (and record) a container; the answer carries the plugin's adjustment."""
        req = api.CreateContainerRequest(pod=pod, container=ctr)
        self._creating[ctr.id] = []
        try:
            rsp = await self._relay(
                Event.CREATE_CONTAINER,
                "CreateContainer",
                req,
                api.CreateContainerResponse,
                pod,
                ctr,
            )
        finally:
            early = self._creating.pop(ctr.id, [])
        ctr.state = api.ContainerState.CONTAINER_CREATED
        _apply_resources(ctr, rsp.adjust.linux.resources)
        self.containers[ctr.id] = ctr
        self._apply_updates([*early, *rsp.update])
        post = api.PostCreateContainerRequest(pod=pod, container=ctr)
        rsp_type = api.PostCreateContainerResponse
        await self._relay(
            Event.POST_CREATE_CONTAINER, "PostCreateContainer", post, rsp_type, pod, ctr
        )
        return rsp

    async def start_container(self, pod: api.PodSandbox, ctr: api.Container) -> None:
        ctr.state = api.ContainerState.CONTAINER_RUNNING
        req = api.StartContainerRequest(pod=pod, container=ctr)
        rsp_type = api.StartContainerResponse
        await self._relay(Event.START_CONTAINER, "StartContainer", req, rsp_type, pod, ctr)

    async def update_container(
        self, pod: api.PodSandbox, ctr: api.Container, resources: api.LinuxResources
    ) -> api.UpdateContainerResponse:
        req = api.UpdateContainerRequest(pod=pod, container=ctr, linux_resources=resources)
        rsp = await self._relay(
            Event.UPDATE_CONTAINER, "UpdateContainer", req, api.UpdateContainerResponse, pod, ctr
        )
        _apply_resources(ctr, resources)
        self._apply_updates(list(rsp.update))
        return rsp

    async def stop_container(
        self, pod: api.PodSandbox, ctr: api.Container
    ) -> api.StopContainerResponse:
        ctr.state = api.ContainerState.CONTAINER_STOPPED
        req = api.StopContainerRequest(pod=pod, container=ctr)
        rsp = await self._relay(
            Event.STOP_CONTAINER, "StopContainer", req, api.StopContainerResponse, pod, ctr
        )
        self._apply_updates(list(rsp.update))
        return rsp

    async def remove_container(self, pod: api.PodSandbox, ctr: api.Container) -> None:
        self.containers.pop(ctr.id, None)
        req = api.RemoveContainerRequest(pod=pod, container=ctr)
        rsp_type = api.RemoveContainerResponse
        await self._relay(Event.REMOVE_CONTAINER, "RemoveContainer", req, rsp_type, pod, ctr)


def _apply_resources(ctr: api.Container, changes: api.LinuxResources) -> None:
    """Merge the set fields of ``changes`` into the container's resources."""
    change = convert.resources_from_proto(changes)
    if change is None:
        return
    current = convert.resources_from_proto(ctr.linux.resources) or Resources()
    set_fields = {k: v for k, v in attrs.asdict(change).items() if v is not None}
    merged = attrs.evolve(current, **set_fields)
    linux = ctr.linux if betterproto.serialized_on_wire(ctr.linux) else api.LinuxContainer()
    linux.resources = convert.resources_to_proto(merged)
    ctr.linux = linux


async def _unix_listener(path: str) -> trio.SocketListener:
    _unlink(path)
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    await sock.bind(path)
    sock.listen(16)
    return trio.SocketListener(sock)


def _unlink(path: str) -> None:
    with suppress(FileNotFoundError):
        os.unlink(path)
