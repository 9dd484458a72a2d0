"""The running daemon process: /metrics, /healthz and /readyz scraped over HTTP while the
runtime (the NRI simulator) drives it, and a stalled HTTP client that does not hold it up."""

from __future__ import annotations

import shutil
import socket
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import trio

from nri_resmgr.sim.connection import SimPlugin
from nri_resmgr.sim.runtime import Simulator
from nri_resmgr.sim.synthetic import N4C16, write_sysfs
from tests.reliability.daemon_proc import daemon_process
from tests.reliability.soak import cycle, discard_updates

GUARD = 60.0  # a hang guard, not a timing assertion


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="obs-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def config(port: int) -> str:
    return f"""\
apiVersion: config.nri/v1alpha1
kind: TopologyAwarePolicy
metadata: {{name: default}}
spec:
  reservedResources: {{cpu: "cpuset:0"}}
  instrumentation: {{httpEndpoint: "127.0.0.1:{port}", prometheusExport: true}}
"""


@asynccontextmanager
async def running(workdir: Path) -> AsyncIterator[tuple[SimPlugin, httpx.AsyncClient, int]]:
    port = free_port()
    sock = str(workdir / "nri.sock")
    host_root = write_sysfs(workdir / "host", N4C16)
    base = f"http://127.0.0.1:{port}"
    async with Simulator.listen(sock) as sim, trio.open_nursery() as nursery:
        nursery.start_soon(discard_updates, sim)
        with daemon_process(workdir, sock, host_root, config=config(port)):
            with trio.fail_after(GUARD):
                plugin = await sim.wait_plugin()
            async with httpx.AsyncClient(base_url=base, timeout=GUARD) as http:
                yield plugin, http, port
        nursery.cancel_scope.cancel()


@pytest.mark.integration
async def test_a_running_daemon_serves_probes_and_metrics(workdir: Path) -> None:
    async with running(workdir) as (plugin, http, _):
        # wait_plugin returned after Synchronize: registered and synchronized means ready.
        assert (await http.get("/readyz")).status_code == 200
        assert (await http.get("/healthz")).text == "ok\n"
        for n in range(4):
            await cycle(plugin, n)
        reply = await http.get("/metrics")
        assert reply.status_code == 200
        assert reply.headers["content-type"].startswith("text/plain; version=0.0.4")
        text = reply.text
        print("\n".join(line for line in text.splitlines() if not line.startswith("#")))
        ok = 'nri_resmgr_nri_requests_total{method="CreateContainer",outcome="ok"} 4.0'
        assert ok in text
        assert 'nri_resmgr_nri_request_duration_seconds_count{method="Synchronize"} 1.0' in text
        assert 'nri_policy_topologyaware_zone_cpu_capacity_cores{cpus="8-15"' in text
        # Every container of the cycles was removed again: no container left in any zone.
        assert 'nri_policy_topologyaware_zone_container_count{zone="socket #1"} 0.0' in text
        open_metrics = await http.get(
            "/metrics", headers={"accept": "application/openmetrics-text; version=1.0.0"}
        )
        assert open_metrics.headers["content-type"].startswith("application/openmetrics-text")
        assert open_metrics.text.endswith("# EOF\n")


@pytest.mark.integration
async def test_a_stalled_http_client_does_not_hold_up_nri_requests(workdir: Path) -> None:
    async with running(workdir) as (plugin, http, port):
        stalled = []
        for _ in range(20):
            s = await trio.open_tcp_stream("127.0.0.1", port)
            await s.send_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # headers never end
            stalled.append(s)
        with trio.fail_after(GUARD):
            for n in range(50):
                await cycle(plugin, n)
            text = (await http.get("/metrics")).text
        assert 'nri_resmgr_nri_requests_total{method="RemoveContainer",outcome="ok"} 50.0' in text
        for s in stalled:
            await s.aclose()
