"""The DRA kubelet plugin as a daemon service: registration socket, DRA socket, slice publisher.

A generic layer under a driver (``driver.Driver``: devices, Prepare, Unprepare), as
``k8s.io/dynamic-resource-allocation/kubeletplugin`` sits under dra-driver-cpu: nothing here
knows what a device stands for.

Start order follows kubelet's expectations: the DRA socket listens before the registration
socket appears, so kubelet never learns of an endpoint that is not there yet.

Stop order is the point of this module: ``stop()`` first closes both listeners and removes
both socket files (kubelet deregisters us, new calls are refused), then drains the requests in
flight, and never waits for the driver itself. A handler in flight may be waiting for the
driver's lock (the CPU driver's is the resource manager's); if stop ran under that lock, the
drain would wait for a handler that waits for stop: a deadlock.

Failure classes: a gRPC server that gives up (socket removed, listener dead) makes ``serve()``
raise ``Fatal`` after removing both sockets, so the daemon shuts down the way SIGTERM does and
the driver never stays registered while unable to serve. Publication errors are recoverable
and handled inside the publisher.
"""

from __future__ import annotations

import logging
from pathlib import Path

import trio

from nri_resmgr.dra.kubeletplugin.driver import Driver
from nri_resmgr.dra.kubeletplugin.grpc_server import (
    DEFAULT_DRAIN_TIMEOUT,
    SOCKET_POLL_INTERVAL,
    GrpcServer,
)
from nri_resmgr.dra.kubeletplugin.metadata import MetadataWriter
from nri_resmgr.dra.kubeletplugin.node_service import ClaimService, dra_handlers
from nri_resmgr.dra.kubeletplugin.publisher import SlicePublisher
from nri_resmgr.dra.kubeletplugin.registration import Registrar, registration_handlers
from nri_resmgr.errors import Fatal
from nri_resmgr.instrumentation import READINESS
from nri_resmgr.kube.api import KubeApi

log = logging.getLogger(__name__)

KUBELET_PLUGINS_DIR = "/var/lib/kubelet/plugins"
KUBELET_REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"
CDI_DIR = "/var/run/cdi"


class KubeletPlugin:
    name = "dra"

    def __init__(
        self,
        driver: Driver,
        driver_name: str,
        kube: KubeApi,
        plugins_dir: str | Path = KUBELET_PLUGINS_DIR,
        registry_dir: str | Path = KUBELET_REGISTRY_DIR,
        *,
        publisher: SlicePublisher | None = None,
        device_metadata: bool = True,
        cdi_dir: str | Path = CDI_DIR,
        drain_timeout: float = DEFAULT_DRAIN_TIMEOUT,
        poll_interval: float = SOCKET_POLL_INTERVAL,
    ) -> None:
        if not driver_name:
            raise ValueError("DRA driver name must not be empty")
        self.driver = driver
        self.driver_name = driver_name
        self.plugin_dir = Path(plugins_dir) / driver_name
        self.registry_dir = Path(registry_dir)
        self.dra_socket = self.plugin_dir / "dra.sock"
        self.registration_socket = self.registry_dir / f"{driver_name}-reg.sock"
        self.publisher = publisher
        self.registrar = Registrar(driver_name, self.dra_socket)
        metadata = MetadataWriter(driver_name, self.plugin_dir, Path(cdi_dir))
        self.claims = ClaimService(
            driver, driver_name, kube, metadata=metadata if device_metadata else None
        )
        self._dra = GrpcServer(
            "DRA",
            self.dra_socket,
            dra_handlers(self.claims),
            drain_timeout=drain_timeout,
            poll_interval=poll_interval,
        )
        self._registration = GrpcServer(
            "registration",
            self.registration_socket,
            registration_handlers(self.registrar),
            drain_timeout=drain_timeout,
            poll_interval=poll_interval,
        )
        self._started = False
        self._stop_requested = trio.Event()
        self._stopped = trio.Event()

    async def start(self, nursery: trio.Nursery) -> None:
        """Start ``serve()`` in ``nursery`` and return once both sockets listen."""
        await nursery.start(self.serve)

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        if self._started:
            raise RuntimeError(f"DRA plugin {self.driver_name}: already started")
        self._started = True
        self._prepare_directories()
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self._dra.serve)
                await nursery.start(self._registration.serve)
                if self.publisher is not None:
                    await nursery.start(self.publisher.run)
                    nursery.start_soon(self._republish_on_registration)
                log.info("DRA driver %s serving on %s", self.driver_name, self.dra_socket)
                task_status.started()
                await self._stop_requested.wait()
                await self._stopped.wait()
                nursery.cancel_scope.cancel(reason="DRA plugin stopped")
        except* Fatal as group:
            # Both servers have unlinked their sockets in their own cleanup by now.
            first = group.exceptions[0]
            raise Fatal(f"DRA driver {self.driver_name}: {first}") from group
        except* OSError as group:
            raise Fatal(
                f"DRA driver {self.driver_name}: cannot serve: {group.exceptions[0]}"
            ) from group

    async def stop(self) -> None:
        """Idempotent. Never takes the manager lock (see the module docstring)."""
        if self._stop_requested.is_set():
            await self._stopped.wait()
            return
        self._stop_requested.set()
        READINESS.set("dra", False)  # kubelet can no longer reach us
        try:
            # Phase one for both, before any drain: both sockets vanish together.
            self._registration.stop_accepting()
            self._dra.stop_accepting()
            await self._registration.stop()
            await self._dra.stop()
        finally:
            self._stopped.set()
        log.info("DRA driver %s stopped", self.driver_name)

    def _prepare_directories(self) -> None:
        try:
            self.plugin_dir.mkdir(mode=0o750, parents=True, exist_ok=True)
            self.registry_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
        except OSError as e:
            raise Fatal(
                f"DRA driver {self.driver_name}: cannot create socket directory: {e}"
            ) from e

    async def _republish_on_registration(self) -> None:
        # kubelet wipes the node's slices when it starts, then re-registers its plugins.
        assert self.publisher is not None
        while True:
            await self.registrar.registered.wait()
            self.registrar.registered = trio.Event()
            self.publisher.trigger()
