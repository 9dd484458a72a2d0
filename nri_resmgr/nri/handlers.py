"""The plugin service: every Plugin RPC the runtime may call, mapped onto the ResourceManager.

Each handler converts the request, calls the manager (which takes the manager lock and asks
the policy), and converts the answer. Updates that the reply cannot carry (remove, and events
arriving through StateChange) are handed to ``defer_updates`` and sent later through
UpdateContainers: sending them from inside the handler would wait on a runtime that, up to
NRI v0.12.0, holds its lock until this very handler has replied.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import attrs

from nri_resmgr._gen.nri.pkg.api import v1alpha1 as api
from nri_resmgr.nri import convert
from nri_resmgr.nri.events import Version, runtime_nri_version, subscription_mask
from nri_resmgr.nri.ttrpc import RawHandler, unary
from nri_resmgr.resmgr.manager import ResourceManager
from nri_resmgr.resmgr.model import Resources, Update

log = logging.getLogger(__name__)

PLUGIN_SERVICE = "nri.pkg.api.v1alpha1.Plugin"
DEFAULT_REGISTRATION_TIMEOUT = 5.0
DEFAULT_REQUEST_TIMEOUT = 2.0


@attrs.frozen
class RuntimeInfo:
    """What Configure told us about the runtime."""

    name: str = ""
    version: str = ""
    nri_version: Version = (0, 0, 0)
    registration_timeout: float = DEFAULT_REGISTRATION_TIMEOUT
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    events: int = 0


def runtime_info_from(req: api.ConfigureRequest) -> RuntimeInfo:
    nri_version = runtime_nri_version(req.nri_version, req.runtime_name, req.runtime_version)
    return RuntimeInfo(
        name=req.runtime_name,
        version=req.runtime_version,
        nri_version=nri_version,
        # Runtimes before NRI v0.7 send 0: keep the documented defaults then.
        registration_timeout=_ms(req.registration_timeout, DEFAULT_REGISTRATION_TIMEOUT),
        request_timeout=_ms(req.request_timeout, DEFAULT_REQUEST_TIMEOUT),
        events=subscription_mask(nri_version),
    )


def _ms(value: int, default: float) -> float:
    return value / 1000.0 if value > 0 else default


class PluginHandlers:
    def __init__(
        self, manager: ResourceManager, defer_updates: Callable[[Sequence[Update]], None]
    ) -> None:
        self._manager = manager
        self._defer = defer_updates
        self.runtime = RuntimeInfo()
        self._sync_pods: list[api.PodSandbox] = []
        self._sync_containers: list[api.Container] = []

    def service(self) -> dict[str, dict[str, RawHandler]]:
        methods: dict[str, RawHandler] = {
            "Configure": unary(api.ConfigureRequest, self.configure),
            "Synchronize": unary(api.SynchronizeRequest, self.synchronize),
            "Shutdown": unary(api.Empty, self.shutdown),
            "RunPodSandbox": unary(api.RunPodSandboxRequest, self.run_pod_sandbox),
            "UpdatePodSandbox": unary(api.UpdatePodSandboxRequest, self.update_pod_sandbox),
            "PostUpdatePodSandbox": unary(api.PostUpdatePodSandboxRequest, self.post_update_pod),
            "StopPodSandbox": unary(api.StopPodSandboxRequest, self.stop_pod_sandbox),
            "RemovePodSandbox": unary(api.RemovePodSandboxRequest, self.remove_pod_sandbox),
            "CreateContainer": unary(api.CreateContainerRequest, self.create_container),
            "PostCreateContainer": unary(api.PostCreateContainerRequest, self.post_create),
            "StartContainer": unary(api.StartContainerRequest, self.start_container),
            "PostStartContainer": unary(api.PostStartContainerRequest, self.post_start),
            "UpdateContainer": unary(api.UpdateContainerRequest, self.update_container),
            "PostUpdateContainer": unary(api.PostUpdateContainerRequest, self.post_update),
            "StopContainer": unary(api.StopContainerRequest, self.stop_container),
            "RemoveContainer": unary(api.RemoveContainerRequest, self.remove_container),
            "StateChange": unary(api.StateChangeEvent, self.state_change),
            "ValidateContainerAdjustment": unary(
                api.ValidateContainerAdjustmentRequest, self.validate
            ),
        }
        return {PLUGIN_SERVICE: methods}

    # -- handshake ------------------------------------------------------------------------

    async def configure(self, req: api.ConfigureRequest) -> api.ConfigureResponse:
        self.runtime = runtime_info_from(req)
        log.info(
            "configured by %s %s (NRI %s): event mask %#x, request timeout %.1fs",
            req.runtime_name or "runtime",
            req.runtime_version or "?",
            req.nri_version or "unknown, assumed v{}.{}.{}".format(*self.runtime.nri_version),
            self.runtime.events,
            self.runtime.request_timeout,
        )
        return api.ConfigureResponse(events=self.runtime.events)

    async def synchronize(self, req: api.SynchronizeRequest) -> api.SynchronizeResponse:
        self._sync_pods.extend(req.pods)
        self._sync_containers.extend(req.containers)
        if req.more:
            # A split sync: every chunk but the last is answered with an empty "more".
            return api.SynchronizeResponse(more=True)
        pods = [convert.pod_from_proto(p) for p in self._sync_pods]
        containers = [convert.container_from_proto(c) for c in self._sync_containers]
        self._sync_pods, self._sync_containers = [], []
        log.info("synchronizing %d pods, %d containers", len(pods), len(containers))
        updates = await self._manager.synchronize(pods, containers)
        return api.SynchronizeResponse(update=_updates_to_proto(updates))

    async def shutdown(self, req: api.Empty) -> api.Empty:
        log.info("the runtime asked the NRI plugin to shut down; it will re-dial")
        return api.Empty()

    # -- pods -----------------------------------------------------------------------------

    async def run_pod_sandbox(self, req: api.RunPodSandboxRequest) -> api.RunPodSandboxResponse:
        await self._manager.run_pod_sandbox(convert.pod_from_proto(req.pod))
        return api.RunPodSandboxResponse()

    async def update_pod_sandbox(
        self, req: api.UpdatePodSandboxRequest
    ) -> api.UpdatePodSandboxResponse:
        pod = convert.pod_from_proto(req.pod)
        resources = convert.resources_from_proto(req.linux_resources)
        if resources is not None:
            pod = attrs.evolve(pod, resources=resources)
        await self._manager.update_pod_sandbox(pod)
        return api.UpdatePodSandboxResponse()

    async def post_update_pod(
        self, req: api.PostUpdatePodSandboxRequest
    ) -> api.PostUpdatePodSandboxResponse:
        return api.PostUpdatePodSandboxResponse()

    async def stop_pod_sandbox(self, req: api.StopPodSandboxRequest) -> api.StopPodSandboxResponse:
        await self._manager.stop_pod_sandbox(convert.pod_from_proto(req.pod))
        return api.StopPodSandboxResponse()

    async def remove_pod_sandbox(
        self, req: api.RemovePodSandboxRequest
    ) -> api.RemovePodSandboxResponse:
        await self._manager.remove_pod_sandbox(convert.pod_from_proto(req.pod))
        return api.RemovePodSandboxResponse()

    # -- containers -----------------------------------------------------------------------

    async def create_container(
        self, req: api.CreateContainerRequest
    ) -> api.CreateContainerResponse:
        pod = convert.pod_from_proto(req.pod)
        ctr = convert.container_from_proto(req.container)
        adjustment, updates = await self._manager.create_container(pod, ctr)
        others = [u for u in updates if u.container_id != ctr.id]
        if len(others) != len(updates):
            # The runtime fails the creation on an update of the container being created.
            log.warning("policy updated container %s while creating it; dropped", ctr.id)
        return api.CreateContainerResponse(
            adjust=convert.adjustment_to_proto(adjustment), update=_updates_to_proto(others)
        )

    async def post_create(
        self, req: api.PostCreateContainerRequest
    ) -> api.PostCreateContainerResponse:
        return api.PostCreateContainerResponse()

    async def start_container(self, req: api.StartContainerRequest) -> api.StartContainerResponse:
        await self._start(req.pod, req.container)
        return api.StartContainerResponse()

    async def post_start(
        self, req: api.PostStartContainerRequest
    ) -> api.PostStartContainerResponse:
        return api.PostStartContainerResponse()

    async def update_container(
        self, req: api.UpdateContainerRequest
    ) -> api.UpdateContainerResponse:
        pod = convert.pod_from_proto(req.pod)
        ctr = convert.container_from_proto(req.container)
        resources = convert.resources_from_proto(req.linux_resources) or ctr.resources
        updates = await self._manager.update_container(pod, ctr, resources or Resources())
        return api.UpdateContainerResponse(update=_updates_to_proto(updates))

    async def post_update(
        self, req: api.PostUpdateContainerRequest
    ) -> api.PostUpdateContainerResponse:
        return api.PostUpdateContainerResponse()

    async def stop_container(self, req: api.StopContainerRequest) -> api.StopContainerResponse:
        pod = convert.pod_from_proto(req.pod)
        ctr = convert.container_from_proto(req.container)
        updates = await self._manager.stop_container(pod, ctr)
        return api.StopContainerResponse(update=_updates_to_proto(updates))

    async def remove_container(
        self, req: api.RemoveContainerRequest
    ) -> api.RemoveContainerResponse:
        await self._remove(req.pod, req.container)
        return api.RemoveContainerResponse()

    async def validate(
        self, req: api.ValidateContainerAdjustmentRequest
    ) -> api.ValidateContainerAdjustmentResponse:
        # We never subscribe to validation; if a runtime asks anyway, we have no objection.
        return api.ValidateContainerAdjustmentResponse(reject=False)

    # -- the pre-v0.12 path ---------------------------------------------------------------

    async def state_change(self, req: api.StateChangeEvent) -> api.Empty:
        event = api.Event(req.event)
        if event == api.Event.RUN_POD_SANDBOX:
            await self._manager.run_pod_sandbox(convert.pod_from_proto(req.pod))
        elif event == api.Event.STOP_POD_SANDBOX:
            await self._manager.stop_pod_sandbox(convert.pod_from_proto(req.pod))
        elif event == api.Event.REMOVE_POD_SANDBOX:
            await self._manager.remove_pod_sandbox(convert.pod_from_proto(req.pod))
        elif event == api.Event.START_CONTAINER:
            await self._start(req.pod, req.container)
        elif event == api.Event.REMOVE_CONTAINER:
            await self._remove(req.pod, req.container)
        else:
            log.debug("state change %s: nothing to do", event.name)
        return api.Empty()

    async def _start(self, pod: api.PodSandbox, ctr: api.Container) -> None:
        await self._manager.start_container(
            convert.pod_from_proto(pod), convert.container_from_proto(ctr)
        )

    async def _remove(self, pod: api.PodSandbox, ctr: api.Container) -> None:
        updates = await self._manager.remove_container(
            convert.pod_from_proto(pod), convert.container_from_proto(ctr)
        )
        if updates:
            self._defer(updates)


def _updates_to_proto(updates: Sequence[Update]) -> list[api.ContainerUpdate]:
    return [convert.update_to_proto(u) for u in updates]
