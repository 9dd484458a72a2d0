"""The runtime's end of one plugin connection, for the simulator.

It behaves like the reference runtime of a chosen NRI version: it waits for RegisterPlugin,
sends Configure (with the fields that version has), synchronizes (splitting when asked to),
validates the plugin's event mask, and delivers events through dedicated RPCs or StateChange.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from typing import TypeVar

import attrs
import betterproto
import trio

from nri_resmgr._gen.nri.pkg.api import v1alpha1 as api
from nri_resmgr.errors import ResmgrError
from nri_resmgr.nri.errors import Code, ConnectionLost, ProtocolError, RpcError
from nri_resmgr.nri.events import (
    STATE_CHANGE_EVENTS,
    V0_7,
    V0_10,
    V0_12,
    Version,
    has_event,
    parse_version,
    valid_events,
)
from nri_resmgr.nri.handlers import PLUGIN_SERVICE
from nri_resmgr.nri.mux import PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN, Mux
from nri_resmgr.nri.stub import RUNTIME_SERVICE
from nri_resmgr.nri.ttrpc import TtrpcServer, unary
from nri_resmgr.nri.ttrpc_client import TtrpcClient

log = logging.getLogger(__name__)

Rsp = TypeVar("Rsp", bound=betterproto.Message)
_NAME_RE = re.compile(r"^[A-Za-z0-9_.+-]+$")
_INDEX_RE = re.compile(r"^[0-9]{2}$")


@attrs.frozen
class SimConfig:
    nri_version: str = "v0.12.2"
    runtime_name: str = "nri-resmgr-simulator"
    runtime_version: str = "v0.1.0"
    registration_timeout: float = 5.0
    request_timeout: float = 2.0
    # Objects (pods + containers) per Synchronize message; None: split only when too big.
    sync_chunk: int | None = None
    # Call Configure and wait for its answer before answering RegisterPlugin.
    configure_before_register_reply: bool = False

    @property
    def version(self) -> Version:
        return parse_version(self.nri_version) or (0, 0, 0)


class PluginRejected(ResmgrError):
    """The runtime side refused the plugin during its handshake."""


Snapshot = Callable[[], tuple[Sequence[api.PodSandbox], Sequence[api.Container]]]
UpdateSink = Callable[[list[api.ContainerUpdate]], list[api.ContainerUpdate]]


class SimPlugin:
    def __init__(self, stream: trio.SocketStream, config: SimConfig, on_update: UpdateSink) -> None:
        self.config = config
        self._mux = Mux(stream)
        self._on_update = on_update
        self.client = TtrpcClient(self._mux.channel(PLUGIN_SERVICE_CONN))
        service = {
            "RegisterPlugin": unary(api.RegisterPluginRequest, self._register),
            "UpdateContainers": unary(api.UpdateContainersRequest, self._update_containers),
        }
        self._server = TtrpcServer(
            self._mux.channel(RUNTIME_SERVICE_CONN), {RUNTIME_SERVICE: service}
        )
        self.name = ""
        self.index = ""
        self.events = 0
        self.state_change_fallback = False
        self.error: BaseException | None = None
        self.closed = trio.Event()
        self._registered = trio.Event()
        self._configured = trio.Event()
        self._scope = trio.CancelScope()

    # -- lifecycle --------------------------------------------------------------------------

    async def run(self, snapshot: Snapshot, on_ready: Callable[[SimPlugin], None]) -> None:
        """Handshake, then ``on_ready(self)``; runs until the connection ends or ``close``."""
        try:
            with self._scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._mux.run)
                    nursery.start_soon(self._server.serve)
                    nursery.start_soon(self.client.run)
                    await self._handshake(snapshot)
                    on_ready(self)
        except BaseException as exc:
            self.error = exc
            if not isinstance(exc, (Exception, BaseExceptionGroup)):
                raise
            log.info("simulator: plugin %s-%s closed: %r", self.index, self.name, exc)
        finally:
            self.closed.set()
            await self._mux.aclose()

    def close(self) -> None:
        self._scope.cancel(reason="simulated runtime closed the plugin")

    async def send_raw(self, data: bytes) -> None:
        """Write raw bytes on the trunk (to test the plugin against broken input)."""
        await self._mux.send_raw(data)

    async def _handshake(self, snapshot: Snapshot) -> None:
        with trio.fail_after(self.config.registration_timeout):
            await self._registered.wait()
        if not self.config.configure_before_register_reply:
            await self._configure()
        await self._configured.wait()
        pods, containers = snapshot()
        await self._synchronize(list(pods), list(containers))

    # -- the runtime service ----------------------------------------------------------------

    async def _register(self, req: api.RegisterPluginRequest) -> api.Empty:
        if not _NAME_RE.match(req.plugin_name):
            raise RpcError(Code.UNKNOWN, f"invalid plugin name {req.plugin_name!r}")
        if not _INDEX_RE.match(req.plugin_idx):
            raise RpcError(Code.UNKNOWN, f"invalid plugin index {req.plugin_idx!r}")
        self.name, self.index = req.plugin_name, req.plugin_idx
        self._registered.set()
        if self.config.configure_before_register_reply:
            # The plugin sees Configure while its RegisterPlugin call is still unanswered.
            await self._configure()
        return api.Empty()

    async def _update_containers(
        self, req: api.UpdateContainersRequest
    ) -> api.UpdateContainersResponse:
        return api.UpdateContainersResponse(failed=self._on_update(list(req.update)))

    # -- handshake calls --------------------------------------------------------------------

    async def _configure(self) -> None:
        version = self.config.version
        req = api.ConfigureRequest(
            runtime_name=self.config.runtime_name, runtime_version=self.config.runtime_version
        )
        if version >= V0_7:
            req.registration_timeout = int(self.config.registration_timeout * 1000)
            req.request_timeout = int(self.config.request_timeout * 1000)
        if version >= V0_12:
            req.nri_version = self.config.nri_version
        rsp = await self.call("Configure", req, api.ConfigureResponse)
        valid = valid_events(version)
        events = rsp.events or valid
        if events & ~valid:
            raise PluginRejected(f"invalid plugin events: {events & ~valid:#x}")
        self.events = events
        self._configured.set()

    async def _synchronize(
        self, pods: list[api.PodSandbox], containers: list[api.Container]
    ) -> None:
        chunk = self.config.sync_chunk if self.config.version >= V0_7 else None
        while True:
            try:
                await self._sync_in_chunks(pods, containers, chunk)
                return
            except RpcError as exc:
                total = len(pods) + len(containers)
                if exc.code != Code.RESOURCE_EXHAUSTED or self.config.version < V0_7 or total <= 8:
                    raise
                # Too big for one ttrpc message: retry with fewer objects per message.
                chunk = max(8, int((chunk or total) * 0.9))

    async def _sync_in_chunks(
        self, pods: list[api.PodSandbox], containers: list[api.Container], chunk: int | None
    ) -> None:
        objects: list[api.PodSandbox | api.Container] = [*pods, *containers]
        size = chunk or max(1, len(objects))
        batches = [objects[i : i + size] for i in range(0, len(objects), size)] or [[]]
        for n, batch in enumerate(batches):
            more = n < len(batches) - 1
            req = api.SynchronizeRequest(
                pods=[o for o in batch if isinstance(o, api.PodSandbox)],
                containers=[o for o in batch if isinstance(o, api.Container)],
                more=more,
            )
            rsp = await self.call("Synchronize", req, api.SynchronizeResponse)
            if more and (not rsp.more or rsp.update):
                raise PluginRejected("plugin does not handle split sync requests")
        self._on_update(list(rsp.update))

    # -- events -----------------------------------------------------------------------------

    async def call(self, method: str, req: betterproto.Message, rsp_type: type[Rsp]) -> Rsp:
        return await self.client.call(
            PLUGIN_SERVICE, method, req, rsp_type, self.config.request_timeout
        )

    async def deliver(
        self,
        event: api.Event,
        method: str,
        req: betterproto.Message,
        rsp_type: type[Rsp],
        pod: api.PodSandbox,
        container: api.Container | None = None,
    ) -> Rsp | None:
        """Send one event if subscribed, as the runtime of this version would; None if
        skipped or if the plugin failed fatally (it is then closed and the operation goes on)."""
        if self.closed.is_set() or not has_event(self.events, event):
            return None
        if event == api.Event.UPDATE_POD_SANDBOX and self.config.version < V0_10:
            return None
        try:
            if event in STATE_CHANGE_EVENTS and self._uses_state_change():
                await self._state_change(event, pod, container)
                return rsp_type()
            try:
                return await self.call(method, req, rsp_type)
            except RpcError as exc:
                if exc.code != Code.UNIMPLEMENTED or event not in STATE_CHANGE_EVENTS:
                    raise
                log.warning("plugin %s lacks %s; falling back to StateChange", self.name, method)
                self.state_change_fallback = True
                await self._state_change(event, pod, container)
                return rsp_type()
        except (ConnectionLost, ProtocolError) as exc:
            self._fatal(exc)
            return None
        except RpcError as exc:
            if exc.code != Code.DEADLINE_EXCEEDED:
                raise
            self._fatal(exc)
            return None

    def _uses_state_change(self) -> bool:
        return self.config.version < V0_12 or self.state_change_fallback

    async def _state_change(
        self, event: api.Event, pod: api.PodSandbox, container: api.Container | None
    ) -> None:
        evt = api.StateChangeEvent(event=event, pod=pod)
        if container is not None:
            evt.container = container
        await self.call("StateChange", evt, api.Empty)

    def _fatal(self, exc: Exception) -> None:
        log.warning("simulator: closing plugin %s-%s: %s", self.index, self.name, exc)
        self.close()
