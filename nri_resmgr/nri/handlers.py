"""The plugin service: every Plugin RPC the runtime may call, mapped onto the ResourceManager.

Each handler converts the request, calls the manager (which takes the manager lock and asks
the policy), and converts the answer. Updates that the reply cannot carry (remove, and events
arriving through StateChange) are handed to ``defer_updates`` and sent later through
UpdateContainers: sending them from inside the handler would wait on a runtime that, up to
NRI v0.12.0, holds its lock until this very handler has replied.

The per-container events go through ``nri_resmgr.nri.wire``, which decodes straight into
the model and encodes the replies by hand: they are the hot path (see ``nox -s bench``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TypeVar

import attrs

from nri_resmgr._gen.nri.pkg.api import v1alpha1 as api
from nri_resmgr.instrumentation import READINESS, observe_nri_handlers, observe_nri_inline
from nri_resmgr.nri import convert, wire
from nri_resmgr.nri.errors import Code, RpcError
from nri_resmgr.nri.events import Version, runtime_nri_version, subscription_mask
from nri_resmgr.nri.ttrpc import InlineHandler, RawHandler, unary
from nri_resmgr.resmgr.manager import ResourceManager
from nri_resmgr.resmgr.model import Container, Pod, Resources, Update

log = logging.getLogger(__name__)

PLUGIN_SERVICE = "nri.pkg.api.v1alpha1.Plugin"
DEFAULT_REGISTRATION_TIMEOUT = 5.0
DEFAULT_REQUEST_TIMEOUT = 2.0
# A split Synchronize (chunks with more=true) is held until its last chunk. The runtime sends
# chunks just under its 4 MiB message limit; these bounds admit a node with tens of
# thousands of containers and stop a runtime (or a peer posing as one) from growing us
# without end. Past them the sync is refused with a clear error and what was held dropped.
MAX_SPLIT_SYNC_BYTES = 256 << 20
MAX_SPLIT_SYNC_OBJECTS = 200_000


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
        self._sync_pods: list[Pod] = []
        self._sync_containers: list[Container] = []
        self._sync_bytes = 0

    def service(self) -> dict[str, dict[str, RawHandler]]:
        methods: dict[str, RawHandler] = {
            "Configure": unary(api.ConfigureRequest, self.configure),
            "Synchronize": self.synchronize,
            "Shutdown": unary(api.Empty, self.shutdown),
            "RunPodSandbox": self.run_pod_sandbox,
            "UpdatePodSandbox": unary(api.UpdatePodSandboxRequest, self.update_pod_sandbox),
            "PostUpdatePodSandbox": _no_op,
            "StopPodSandbox": self.stop_pod_sandbox,
            "RemovePodSandbox": self.remove_pod_sandbox,
            "CreateContainer": self.create_container,
            "PostCreateContainer": _no_op,
            "StartContainer": self.start_container,
            "PostStartContainer": _no_op,
            "UpdateContainer": unary(api.UpdateContainerRequest, self.update_container),
            "PostUpdateContainer": _no_op,
            "StopContainer": self.stop_container,
            "RemoveContainer": self.remove_container,
            "StateChange": self.state_change,
            "ValidateContainerAdjustment": unary(
                api.ValidateContainerAdjustmentRequest, self.validate
            ),
        }
        return {PLUGIN_SERVICE: observe_nri_handlers(methods)}

    def inline_service(self) -> dict[str, dict[str, InlineHandler]]:
        """The events answered in the ttrpc reader's task, without a handler task, when the
        manager lock is free (see ``TtrpcServer``): the per-pod and per-container events,
        whose work is the policy's, synchronous and never waiting on anything."""
        bodies: dict[str, Callable[[bytes], bytes]] = {
            "RunPodSandbox": self._run_pod_sandbox,
            "StopPodSandbox": self._stop_pod_sandbox,
            "RemovePodSandbox": self._remove_pod_sandbox,
            "CreateContainer": self._create_container,
            "StartContainer": self._start_container,
            "StopContainer": self._stop_container,
            "RemoveContainer": self._remove_container,
        }
        methods = {name: self._when_free(body) for name, body in bodies.items()}
        for name in _POST_EVENTS:
            methods[name] = _no_op_now
        return {PLUGIN_SERVICE: observe_nri_inline(methods)}

    def _when_free(self, body: Callable[[bytes], bytes]) -> InlineHandler:
        manager = self._manager

        def now(payload: bytes) -> bytes | None:
            lock = manager.lock
            if lock.locked():
                return None  # the task path waits its turn
            # Not a @contextmanager: its generator frame was a measurable part of every
            # container event. acquire_nowait raises trio.WouldBlock if someone waits.
            lock.acquire_nowait()
            try:
                return body(payload)
            finally:
                lock.release()

        return now

    async def _locked(self, body: Callable[[bytes], bytes], payload: bytes) -> bytes:
        async with self._manager.lock:
            return body(payload)

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

    async def synchronize(self, payload: bytes) -> bytes:
        pods, containers, more = _decode(wire.synchronize_request, payload, "SynchronizeRequest")
        self._sync_pods.extend(pods)
        self._sync_containers.extend(containers)
        self._sync_bytes += len(payload)
        self._check_split_sync_bounds()
        if more:
            # A split sync: every chunk but the last is answered with an empty "more".
            return _SYNC_MORE
        pods, containers = self._sync_pods, self._sync_containers
        self._reset_split_sync()
        log.info("synchronizing %d pods, %d containers", len(pods), len(containers))
        updates = await self._manager.synchronize(pods, containers)
        READINESS.set("nri", True)  # registered (Synchronize follows registration) and synced
        return bytes(wire.updates_field(1, updates))

    def _check_split_sync_bounds(self) -> None:
        objects = len(self._sync_pods) + len(self._sync_containers)
        if self._sync_bytes <= MAX_SPLIT_SYNC_BYTES and objects <= MAX_SPLIT_SYNC_OBJECTS:
            return
        held = self._sync_bytes
        self._reset_split_sync()
        raise RpcError(
            Code.RESOURCE_EXHAUSTED,
            f"split Synchronize too large: {held} bytes and {objects} pods and containers "
            f"so far (limits {MAX_SPLIT_SYNC_BYTES} bytes, {MAX_SPLIT_SYNC_OBJECTS} objects)",
        )

    def _reset_split_sync(self) -> None:
        self._sync_pods, self._sync_containers, self._sync_bytes = [], [], 0

    async def shutdown(self, req: api.Empty) -> api.Empty:
        log.info("the runtime asked the NRI plugin to shut down; it will re-dial")
        return api.Empty()

    # -- pods -----------------------------------------------------------------------------

    async def run_pod_sandbox(self, payload: bytes) -> bytes:
        return await self._locked(self._run_pod_sandbox, payload)

    def _run_pod_sandbox(self, payload: bytes) -> bytes:
        pod = _decode(wire.pod_request, payload, "RunPodSandbox")
        self._manager.run_pod_sandbox_held(pod)
        return b""

    async def update_pod_sandbox(
        self, req: api.UpdatePodSandboxRequest
    ) -> api.UpdatePodSandboxResponse:
        pod = convert.pod_from_proto(req.pod)
        resources = convert.resources_from_proto(req.linux_resources)
        if resources is not None:
            pod = attrs.evolve(pod, resources=resources)
        await self._manager.update_pod_sandbox(pod)
        return api.UpdatePodSandboxResponse()

    async def stop_pod_sandbox(self, payload: bytes) -> bytes:
        return await self._locked(self._stop_pod_sandbox, payload)

    def _stop_pod_sandbox(self, payload: bytes) -> bytes:
        pod = _decode(wire.pod_request, payload, "StopPodSandbox")
        self._manager.stop_pod_sandbox_held(pod)
        return b""

    async def remove_pod_sandbox(self, payload: bytes) -> bytes:
        return await self._locked(self._remove_pod_sandbox, payload)

    def _remove_pod_sandbox(self, payload: bytes) -> bytes:
        pod = _decode(wire.pod_request, payload, "RemovePodSandbox")
        self._manager.remove_pod_sandbox_held(pod)
        return b""

    # -- containers -----------------------------------------------------------------------

    async def create_container(self, payload: bytes) -> bytes:
        return await self._locked(self._create_container, payload)

    def _create_container(self, payload: bytes) -> bytes:
        pod, ctr = _decode(wire.pod_and_container, payload, "CreateContainerRequest")
        adjustment, updates = self._manager.create_container_held(pod, ctr)
        others = [u for u in updates if u.container_id != ctr.id]
        if len(others) != len(updates):
            # The runtime fails the creation on an update of the container being created.
            log.warning("policy updated container %s while creating it; dropped", ctr.id)
        return wire.create_container_response(adjustment, others)

    async def start_container(self, payload: bytes) -> bytes:
        return await self._locked(self._start_container, payload)

    def _start_container(self, payload: bytes) -> bytes:
        pod, ctr = _decode(wire.pod_and_container, payload, "StartContainerRequest")
        self._manager.start_container_held(pod, ctr)
        return b""

    async def update_container(
        self, req: api.UpdateContainerRequest
    ) -> api.UpdateContainerResponse:
        pod = convert.pod_from_proto(req.pod)
        ctr = convert.container_from_proto(req.container)
        resources = convert.resources_from_proto(req.linux_resources) or ctr.resources
        updates = await self._manager.update_container(pod, ctr, resources or Resources())
        return api.UpdateContainerResponse(update=_updates_to_proto(updates))

    async def stop_container(self, payload: bytes) -> bytes:
        return await self._locked(self._stop_container, payload)

    def _stop_container(self, payload: bytes) -> bytes:
        pod, ctr = _decode(wire.pod_and_container, payload, "StopContainerRequest")
        updates = self._manager.stop_container_held(pod, ctr)
        return bytes(wire.updates_field(1, updates))

    async def remove_container(self, payload: bytes) -> bytes:
        return await self._locked(self._remove_container, payload)

    def _remove_container(self, payload: bytes) -> bytes:
        pod, ctr = _decode(wire.pod_and_container, payload, "RemoveContainerRequest")
        updates = self._manager.remove_container_held(pod, ctr)
        if updates:
            self._defer(updates)
        return b""

    async def validate(
        self, req: api.ValidateContainerAdjustmentRequest
    ) -> api.ValidateContainerAdjustmentResponse:
        # We never subscribe to validation; if a runtime asks anyway, we have no objection.
        return api.ValidateContainerAdjustmentResponse(reject=False)

    # -- the pre-v0.12 path ---------------------------------------------------------------

    async def state_change(self, payload: bytes) -> bytes:
        event_number = _decode(_state_change_event, payload, "StateChangeEvent")
        try:
            event = api.Event(event_number)
        except ValueError:
            log.debug("state change for unknown event %d: nothing to do", event_number)
            return b""
        if event not in _STATE_CHANGES_HANDLED:
            log.debug("state change %s: nothing to do", event.name)
            return b""
        pod, ctr = _decode(_state_change_objects, payload, "StateChangeEvent")
        if event == api.Event.RUN_POD_SANDBOX:
            await self._manager.run_pod_sandbox(pod)
        elif event == api.Event.STOP_POD_SANDBOX:
            await self._manager.stop_pod_sandbox(pod)
        elif event == api.Event.REMOVE_POD_SANDBOX:
            await self._manager.remove_pod_sandbox(pod)
        elif event == api.Event.START_CONTAINER:
            await self._manager.start_container(pod, ctr)
        else:
            await self._remove(pod, ctr)
        return b""

    async def _remove(self, pod: Pod, ctr: Container) -> None:
        updates = await self._manager.remove_container(pod, ctr)
        if updates:
            self._defer(updates)


_SYNC_MORE = bytes(api.SynchronizeResponse(more=True))
_STATE_CHANGES_HANDLED = frozenset(
    {
        api.Event.RUN_POD_SANDBOX,
        api.Event.STOP_POD_SANDBOX,
        api.Event.REMOVE_POD_SANDBOX,
        api.Event.START_CONTAINER,
        api.Event.REMOVE_CONTAINER,
    }
)
T = TypeVar("T")


def _decode(decoder: Callable[[bytes], T], payload: bytes, what: str) -> T:
    try:
        return decoder(payload)
    except wire.WireError as exc:
        raise RpcError(Code.INTERNAL, f"cannot decode {what}: {exc}") from exc


async def _no_op(payload: bytes) -> bytes:
    """The post-events carry nothing we act on: their (empty) reply needs no decoding."""
    return b""


def _no_op_now(payload: bytes) -> bytes:
    return b""


_POST_EVENTS = (
    "PostUpdatePodSandbox",
    "PostCreateContainer",
    "PostStartContainer",
    "PostUpdateContainer",
)


def _state_change_event(payload: bytes) -> int:
    event = 0
    for number, value in wire.fields(payload):
        if number == 1 and isinstance(value, int):
            event = value
    return event


def _state_change_objects(payload: bytes) -> tuple[Pod, Container]:
    return wire.pod_and_container(payload, pod_field=2, ctr_field=3)


def _updates_to_proto(updates: Sequence[Update]) -> list[api.ContainerUpdate]:
    return [convert.update_to_proto(u) for u in updates]
