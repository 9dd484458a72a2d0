"""Readiness over the daemon's whole life, not only its start (issue 34 item 11).

``/readyz`` is 200 only while the daemon is registered with the runtime and has had its
Synchronize (and, with DRA, while kubelet has it registered): when the runtime goes away it
is 503 naming ``nri``; after the runtime is back it stays 503 until the new Synchronize, then
is 200 again. The same for kubelet: a new registration (kubelet restarted and asks
``GetInfo`` again) is not-ready until kubelet confirms it, and a refusal or the driver
stopping makes it not ready.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import trio

from nri_resmgr.instrumentation import READINESS
from nri_resmgr.sim.connection import SimPlugin
from nri_resmgr.sim.runtime import Simulator
from nri_resmgr.sim.synthetic import N4C16, write_sysfs
from tests.dra.conftest import (  # noqa: F401  (fixtures)
    RunningPlugin,
    aio_loop,
    kubelet,
    kubelet_stubs,
    running_plugin,
    socket_dir,
)
from tests.dra.kubelet_client import Kubelet
from tests.instrumentation.test_process import config, free_port
from tests.reliability.daemon_proc import daemon_process
from tests.reliability.soak import discard_updates

GUARD = 60.0  # a hang guard, not a timing assertion


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="ready-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def readyz(http: httpx.AsyncClient) -> httpx.Response:
    """/readyz, waiting for the endpoint to listen (the daemon may not be up yet)."""
    with trio.fail_after(GUARD):
        while True:
            try:
                return await http.get("/readyz")
            except httpx.TransportError:
                await trio.sleep(0.05)


async def until_status(http: httpx.AsyncClient, status: int) -> httpx.Response:
    with trio.fail_after(GUARD):
        while True:
            reply = await readyz(http)
            if reply.status_code == status:
                return reply
            await trio.sleep(0.05)


@pytest.mark.integration
async def test_readyz_follows_the_runtime_connection_across_restarts(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    sock = str(workdir / "nri.sock")
    host_root = write_sysfs(workdir / "host", N4C16)
    seen_before_sync: list[str] = []
    http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=GUARD)
    synchronize = SimPlugin._synchronize

    async def probing_synchronize(self: SimPlugin, pods: list[Any], ctrs: list[Any]) -> None:
        # Registered and configured, Synchronize not sent yet: not ready.
        reply = await readyz(http)
        seen_before_sync.append(f"{reply.status_code} {reply.text.strip()}")
        await synchronize(self, pods, ctrs)

    monkeypatch.setattr(SimPlugin, "_synchronize", probing_synchronize)
    async with http:
        with daemon_process(workdir, sock, host_root, config=config(port)) as proc:
            for life in range(3):
                async with Simulator.listen(sock) as sim, trio.open_nursery() as nursery:
                    nursery.start_soon(discard_updates, sim)
                    with trio.fail_after(GUARD):
                        await sim.wait_plugin()
                    reply = await readyz(http)
                    assert (reply.status_code, reply.text) == (200, "ok\n"), life
                    nursery.cancel_scope.cancel()
                # The runtime is gone (its socket too): not ready, saying why.
                reply = await until_status(http, 503)
                assert reply.text == "not ready: nri\n"
                assert proc.poll() is None
    assert seen_before_sync == ["503 not ready: nri"] * 3


async def test_dra_readiness_follows_kubelet_registration(
    running_plugin: RunningPlugin,  # noqa: F811
    kubelet: Kubelet,  # noqa: F811
) -> None:
    READINESS.reset()
    READINESS.require("dra")
    reg = running_plugin.reg_socket
    assert READINESS.missing() == ["dra"]
    for restart in range(2):  # kubelet's start, then a kubelet restart
        await kubelet.get_info(reg)
        assert READINESS.missing() == ["dra"], f"ready before kubelet confirmed ({restart})"
        await kubelet.notify(reg, registered=True)
        assert READINESS.missing() == [] and READINESS.ready
    await kubelet.get_info(reg)
    with pytest.raises(grpc.RpcError):
        await kubelet.notify(reg, registered=False, error="unsupported version")
    assert READINESS.missing() == ["dra"]
    await kubelet.get_info(reg)
    await kubelet.notify(reg, registered=True)
    assert READINESS.ready
    await running_plugin.plugin.stop()
    assert READINESS.missing() == ["dra"]
    READINESS.reset()
