"""One plugin session on a connected NRI socket: register, serve the runtime, push updates.

The plugin service is served on mux connection 1 from the moment the socket is up, because
the runtime may send Configure before our RegisterPlugin call has been answered.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence

import trio

from nri_resmgr._gen.nri.pkg.api import v1alpha1 as api
from nri_resmgr.instrumentation import RequestObserver
from nri_resmgr.nri import convert
from nri_resmgr.nri.errors import ConnectionLost, ProtocolError, RpcError
from nri_resmgr.nri.events import PLUGIN_NRI_VERSION
from nri_resmgr.nri.handlers import DEFAULT_REGISTRATION_TIMEOUT, PluginHandlers
from nri_resmgr.nri.mux import PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN, Mux
from nri_resmgr.nri.ttrpc import TtrpcServer
from nri_resmgr.nri.ttrpc_client import TtrpcClient
from nri_resmgr.resmgr.manager import ResourceManager
from nri_resmgr.resmgr.model import Update

log = logging.getLogger(__name__)

RUNTIME_SERVICE = "nri.pkg.api.v1alpha1.Runtime"
# UpdateContainers may wait behind an event the runtime is dispatching (NRI <= v0.12.0 holds
# its lock meanwhile), so it gets more than one request timeout, but never forever: at least
# UPDATE_TIMEOUT, and twice the request timeout the runtime configured where that is longer
# (a runtime that gives its plugins 60 s is one that can take that long itself).
UPDATE_TIMEOUT = 10.0


def update_timeout(request_timeout: float) -> float:
    """How long an UpdateContainers call may wait for the runtime's answer."""
    return max(UPDATE_TIMEOUT, 2 * request_timeout)


class PluginSession:
    """Lives exactly as long as one connection; ``run`` raises when the connection ends."""

    def __init__(
        self, manager: ResourceManager, stream: trio.SocketStream, name: str, index: str
    ) -> None:
        self._manager = manager
        self._mux = Mux(stream)
        self._client = TtrpcClient(self._mux.channel(RUNTIME_SERVICE_CONN))
        self._deferred_in, self._deferred_out = trio.open_memory_channel[list[Update]](math.inf)
        self.handlers = PluginHandlers(manager, self._defer_updates)
        self._server = TtrpcServer(
            self._mux.channel(PLUGIN_SERVICE_CONN),
            self.handlers.service(),
            RequestObserver("nri"),
        )
        self.name = name
        self.index = index

    async def run(self, on_registered: Callable[[], None] = lambda: None) -> None:
        """Register, call ``on_registered``, serve; raises when the connection ends."""
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._mux.run)
                nursery.start_soon(self._server.serve)
                nursery.start_soon(self._client.run)
                await self._register()
                self._manager.attach_runtime(self)
                nursery.start_soon(self._push_deferred_updates)
                nursery.start_soon(self._manager.retry_failed_updates)
                on_registered()
        except BaseExceptionGroup as group:
            telling = _most_telling(group)
            if telling is group:
                raise
            raise telling from group
        finally:
            self._manager.attach_runtime(None)
            await self._mux.aclose()

    async def _register(self) -> None:
        request = api.RegisterPluginRequest(
            plugin_name=self.name, plugin_idx=self.index, nri_version=PLUGIN_NRI_VERSION
        )
        await self._client.call(
            RUNTIME_SERVICE, "RegisterPlugin", request, api.Empty, DEFAULT_REGISTRATION_TIMEOUT
        )
        log.info("registered with the runtime as NRI plugin %s-%s", self.index, self.name)

    # -- the RuntimeUpdater protocol ------------------------------------------------------

    async def update_containers(self, updates: Sequence[Update]) -> list[Update]:
        """Send updates to the runtime; the ones it could not apply come back."""
        request = api.UpdateContainersRequest(update=[convert.update_to_proto(u) for u in updates])
        try:
            reply = await self._client.call(
                RUNTIME_SERVICE,
                "UpdateContainers",
                request,
                api.UpdateContainersResponse,
                update_timeout(self.handlers.runtime.request_timeout),
            )
        except (RpcError, ConnectionLost, ProtocolError) as exc:
            # At info: the retry (nri_resmgr.resmgr.retry) warns once per container.
            log.info("UpdateContainers of %d containers failed: %s", len(updates), exc)
            return list(updates)
        return [convert.update_from_proto(u) for u in reply.failed]

    def _defer_updates(self, updates: Sequence[Update]) -> None:
        self._deferred_in.send_nowait(list(updates))

    async def _push_deferred_updates(self) -> None:
        # Through the manager, so the policy learns of failures and they are retried.
        async for updates in self._deferred_out:
            await self._manager.send_updates(updates)


_SEVERITY = (ProtocolError, RpcError, ConnectionLost)


def _most_telling(group: BaseExceptionGroup) -> BaseException:
    """One exception for a session that ended: a protocol violation explains more than the
    "connection closed" errors it causes in sibling tasks. Anything else is a bug: re-raise."""
    leaves = list(_leaves(group))
    unexpected = [e for e in leaves if not isinstance(e, (*_SEVERITY, trio.Cancelled))]
    if unexpected:
        return group
    for kind in _SEVERITY:
        for exc in leaves:
            if isinstance(exc, kind):
                return exc
    return group


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]
