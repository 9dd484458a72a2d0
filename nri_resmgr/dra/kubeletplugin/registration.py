"""The kubelet plugin-registration service (``pluginregistration.Registration``).

kubelet's plugin watcher finds our ``<driver>-reg.sock``, calls ``GetInfo`` (1 s deadline) to
learn who we are and where the DRA service listens, validates, and reports the outcome with
``NotifyRegistrationStatus``.

Readiness (``dra``) follows the registration over the daemon's life: not ready from a
``GetInfo`` (kubelet registering us, again after its restart) until kubelet reports success,
not ready after a failure, and not ready once the driver stops.

A registration failure is logged as an error and recorded (``Registrar.status``, and
``Registrar.failed`` is set) but is NOT fatal: kubelet retries registration on its own, and the
daemon's main job (NRI placement) must not stop because kubelet refused an optional DRA
driver; restarting would not cure a refusal either (it is about our name or versions). As the
Go kubeletplugin helper does, we answer a failure notification with a gRPC error, so kubelet's
log shows it too.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import trio
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from nri_resmgr._gen import pluginregistration as pb
from nri_resmgr.dra.kubeletplugin.grpc_server import TrioGate
from nri_resmgr.instrumentation import READINESS

log = logging.getLogger(__name__)

PLUGIN_TYPE = "DRAPlugin"
# Services on the DRA socket, as kubelet names them ("<package short name>.<service>");
# kubelet 1.34+ walks this list in order, 1.32/1.33 pick v1beta1.
SUPPORTED_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin")


@attrs.frozen
class RegistrationStatus:
    """What kubelet last told us about our registration."""

    registered: bool
    error: str = ""


class Registrar:
    """The trio side of the registration service: our identity, and kubelet's verdict."""

    def __init__(self, driver_name: str, endpoint: Path) -> None:
        self.driver_name = driver_name
        self.endpoint = endpoint
        self.status: RegistrationStatus | None = None
        self.failed = trio.Event()
        self.registered = trio.Event()

    async def get_info(self, _: pb.InfoRequest) -> pb.PluginInfo:
        # GetInfo starts a registration (kubelet started, or restarted and lost ours): not
        # ready until kubelet confirms it.
        READINESS.set("dra", False)
        return pb.PluginInfo(
            type=PLUGIN_TYPE,
            name=self.driver_name,
            endpoint=str(self.endpoint),
            supported_versions=list(SUPPORTED_VERSIONS),
        )

    async def notify(self, request: pb.RegistrationStatus) -> pb.RegistrationStatusResponse:
        self.status = RegistrationStatus(request.plugin_registered, request.error)
        READINESS.set("dra", bool(request.plugin_registered))
        if request.plugin_registered:
            log.info("kubelet registered DRA driver %s", self.driver_name)
            self.registered.set()
            return pb.RegistrationStatusResponse()
        log.error(
            "kubelet refused to register DRA driver %s: %s",
            self.driver_name,
            request.error or "(no reason given)",
        )
        self.failed.set()
        raise GRPCError(Status.UNKNOWN, f"failed registration process: {request.error}")


class RegistrationService(pb.RegistrationBase):  # type: ignore[misc]
    """The grpclib handlers: thin asyncio shims over ``Registrar``."""

    def __init__(self, gate: TrioGate, registrar: Registrar) -> None:
        self._gate = gate
        self._registrar = registrar

    async def get_info(self, info_request: pb.InfoRequest) -> pb.PluginInfo:
        return await self._gate.call(self._registrar.get_info, info_request)

    async def notify_registration_status(
        self, registration_status: pb.RegistrationStatus
    ) -> pb.RegistrationStatusResponse:
        return await self._gate.call(self._registrar.notify, registration_status)


def registration_handlers(registrar: Registrar) -> Any:
    def build(gate: TrioGate) -> Sequence[Any]:
        return [RegistrationService(gate, registrar)]

    return build
