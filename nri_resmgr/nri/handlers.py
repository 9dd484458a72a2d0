"""The plugin service: every Plugin RPC the runtime may call, mapped onto the ResourceManager.

One synchronous body per RPC: it decodes the request, calls the manager (which asks the
policy), and encodes the answer. The bodies that reach the manager are registered with the
manager lock (``ttrpc.Sync``): the ttrpc server runs them with it held, at once when it is
free, else in a task that waits its turn. Updates that the reply cannot carry (remove, and
events arriving through StateChange) are handed to ``defer_updates`` and sent later through
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
from nri_resmgr.instrumentation import READINESS
from nri_resmgr.nri import convert, wire
from nri_resmgr.nri.errors import Code, RpcError
from nri_resmgr.nri.events import Version, runtime_nri_version, subscription_mask
from nri_resmgr.nri.ttrpc import Sync, parse
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
    """The Plugin service's bodies, and what the handshake and a split Synchronize keep."""

    def __init__(
        self, manager: ResourceManager, defer_updates: Callable[[Sequence[Update]], None]
    ) -> None:
        self._manager = manager
        self._defer = defer_updates
        self.runtime = RuntimeInfo()
        self._sync_pods: list[Pod] = []
        self._sync_containers: list[Container] = []
        self._sync_bytes = 0

    def service(self) -> dict[str, dict[str, Sync]]:
        """The Plugin service's method table, for ``TtrpcServer``."""
        lock = self._manager.lock

        def locked(body: Callable[[bytes], bytes]) -> Sync:
            return Sync(body, lock)

        methods = {
            "Configure": Sync(self.configure),
            "Synchronize": locked(self.synchronize),
            "Shutdown": Sync(self.shutdown),
            "RunPodSandbox": locked(self.run_pod_sandbox),
            "UpdatePodSandbox": locked(self.update_pod_sandbox),
            "PostUpdatePodSandbox": _NO_OP,
            "StopPodSandbox": locked(self.stop_pod_sandbox),
            "RemovePodSandbox": locked(self.remove_pod_sandbox),
            "CreateContainer": locked(self.create_container),
            "PostCreateContainer": _NO_OP,
            "StartContainer": locked(self.start_container),
            "PostStartContainer": _NO_OP,
            "UpdateContainer": locked(self.update_container),
            "PostUpdateContainer": _NO_OP,
            "StopContainer": locked(self.stop_container),
            "RemoveContainer": locked(self.remove_container),
            "StateChange": locked(self.state_change),
            "ValidateContainerAdjustment": Sync(self.validate),
        }
        return {PLUGIN_SERVICE: methods}

    # -- handshake ------------------------------------------------------------------------

    def configure(self, payload: bytes) -> bytes:
        req = parse(api.ConfigureRequest, payload)
        self.runtime = runtime_info_from(req)
        log.info(
            "configured by %s %s (NRI %s): event mask %#x, request timeout %.1fs",
            req.runtime_name or "runtime",
            req.runtime_version or "?",
            req.nri_version or "unknown, assumed v{}.{}.{}".format(*self.runtime.nri_version),
            self.runtime.events,
            self.runtime.request_timeout,
        )
        return bytes(api.ConfigureResponse(events=self.runtime.events))

    def synchronize(self, payload: bytes) -> bytes:
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
        updates = self._manager.synchronize(pods, containers)
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

    def shutdown(self, payload: bytes) -> bytes:
        parse(api.Empty, payload)
        log.info("the runtime asked the NRI plugin to shut down; it will re-dial")
        return b""

    # -- pods -----------------------------------------------------------------------------

    def run_pod_sandbox(self, payload: bytes) -> bytes:
        pod = _decode(wire.pod_request, payload, "RunPodSandbox")
        self._manager.run_pod_sandbox(pod)
        return b""

    def update_pod_sandbox(self, payload: bytes) -> bytes:
        req = parse(api.UpdatePodSandboxRequest, payload)
        pod = convert.pod_from_proto(req.pod)
        resources = convert.resources_from_proto(req.linux_resources)
        if resources is not None:
            pod = attrs.evolve(pod, resources=resources)
        self._manager.update_pod_sandbox(pod)
        return bytes(api.UpdatePodSandboxResponse())

    def stop_pod_sandbox(self, payload: bytes) -> bytes:
        pod = _decode(wire.pod_request, payload, "StopPodSandbox")
        self._manager.stop_pod_sandbox(pod)
        return b""

    def remove_pod_sandbox(self, payload: bytes) -> bytes:
        pod = _decode(wire.pod_request, payload, "RemovePodSandbox")
        self._manager.remove_pod_sandbox(pod)
        return b""

    # -- containers -----------------------------------------------------------------------

    def create_container(self, payload: bytes) -> bytes:
        pod, ctr = _decode(wire.pod_and_container, payload, "CreateContainerRequest")
        adjustment, updates = self._manager.create_container(pod, ctr)
        others = [u for u in updates if u.container_id != ctr.id]
        if len(others) != len(updates):
            # The runtime fails the creation on an update of the container being created.
            log.warning("policy updated container %s while creating it; dropped", ctr.id)
        return wire.create_container_response(adjustment, others)

    def start_container(self, payload: bytes) -> bytes:
        pod, ctr = _decode(wire.pod_and_container, payload, "StartContainerRequest")
        self._manager.start_container(pod, ctr)
        return b""

    def update_container(self, payload: bytes) -> bytes:
        req = parse(api.UpdateContainerRequest, payload)
        pod = convert.pod_from_proto(req.pod)
        ctr = convert.container_from_proto(req.container)
        resources = convert.resources_from_proto(req.linux_resources) or ctr.resources
        updates = self._manager.update_container(pod, ctr, resources or Resources())
        return bytes(api.UpdateContainerResponse(update=_updates_to_proto(updates)))

    def stop_container(self, payload: bytes) -> bytes:
        pod, ctr = _decode(wire.pod_and_container, payload, "StopContainerRequest")
        updates = self._manager.stop_container(pod, ctr)
        return bytes(wire.updates_field(1, updates))

    def remove_container(self, payload: bytes) -> bytes:
        pod, ctr = _decode(wire.pod_and_container, payload, "RemoveContainerRequest")
        self._remove(pod, ctr)
        return b""

    def _remove(self, pod: Pod, ctr: Container) -> None:
        updates = self._manager.remove_container(pod, ctr)
        if updates:
            self._defer(updates)

    def validate(self, payload: bytes) -> bytes:
        parse(api.ValidateContainerAdjustmentRequest, payload)
        # We never subscribe to validation; if a runtime asks anyway, we have no objection.
        return bytes(api.ValidateContainerAdjustmentResponse(reject=False))

    # -- the pre-v0.12 path ---------------------------------------------------------------

    def state_change(self, payload: bytes) -> bytes:
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
            self._manager.run_pod_sandbox(pod)
        elif event == api.Event.STOP_POD_SANDBOX:
            self._manager.stop_pod_sandbox(pod)
        elif event == api.Event.REMOVE_POD_SANDBOX:
            self._manager.remove_pod_sandbox(pod)
        elif event == api.Event.START_CONTAINER:
            self._manager.start_container(pod, ctr)
        else:
            self._remove(pod, ctr)
        return b""


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


def _no_op(payload: bytes) -> bytes:
    """The post-events carry nothing we act on: their (empty) reply needs no decoding."""
    return b""


_NO_OP = Sync(_no_op)


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
