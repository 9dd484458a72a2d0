"""The HTTP endpoint cannot starve the daemon of file descriptors (issue 34 item 5).

The review's attack: 300 slow HTTP connections against a daemon limited to 256 descriptors
took all of them, so its own socket and file opens failed until the clients timed out. Here
the clients trickle a header byte every two seconds, so they never time out: without a cap
the daemon stays starved for as long as they go on. With it, the daemon holds at most
``connection_cap(256)`` of them, and meanwhile re-dials the runtime after it restarts (a new
NRI socket), answers kubelet on fresh DRA and registration connections, and logs no
"Too many open files". A real daemon process, the NRI simulator as the runtime, a real
kube-apiserver (DRA needs cluster access) and grpcio as kubelet.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from nri_resmgr.kube import KubeClient
from nri_resmgr.kube.resources import TEMPLATE_POLICIES
from nri_resmgr.observability.connections import connection_cap
from nri_resmgr.sim.runtime import Simulator
from tests.agent.conftest import template_crd  # noqa: F401  (fixture)
from tests.agent.test_agent_integration import cr
from tests.agent.test_dra_process import kubelet_dirs  # noqa: F401  (fixture)
from tests.agent.test_process import admin  # noqa: F401  (fixture)
from tests.dra.conftest import kubelet_stubs  # noqa: F401  (fixture)
from tests.dra.kubelet_client import Kubelet, KubeletStubs
from tests.instrumentation.test_process import free_port
from tests.kube.apiserver import ApiServer
from tests.reliability.soak import discard_updates

pytestmark = pytest.mark.integration

LIMIT = 256
CLIENTS = 300
GUARD = 60.0  # a hang guard, not a timing assertion
DRIVER = "template.nri.io"
CLAIM = "0b6f1c2e-9d4a-4e57-8a3b-2c1d5e6f7a80"


def open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def limited(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))


async def slow_client(port: int, stop: trio.Event) -> None:
    """A client that sends a request's first line, then one header byte every 2 s."""
    try:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            while not stop.is_set():
                with trio.move_on_after(2):
                    await stop.wait()
                await stream.send_all(b"a")
    except OSError:
        return  # dropped by the daemon or the kernel: fine for an attacker


async def test_slow_http_clients_leave_nri_and_dra_serviceable(
    template_crd: ApiServer,  # noqa: F811
    admin: tuple[KubeClient, str, str],  # noqa: F811
    kubelet_stubs: KubeletStubs,  # noqa: F811
    kubelet_dirs: tuple[Path, Path],  # noqa: F811
) -> None:
    client, ns, node = admin
    short_dir = kubelet_dirs[0].parent  # short: unix socket paths are limited
    port = free_port()
    spec = {"dra": {"enabled": True}, "instrumentation": {"httpEndpoint": f"127.0.0.1:{port}"}}
    await client.create(TEMPLATE_POLICIES, cr("default", "750m", **spec), ns)
    plugins, registry, nri = short_dir / "plugins", short_dir / "registry", short_dir / "nri.sock"
    log = short_dir / "daemon.log"
    args = [sys.executable, "-m", "nri_resmgr", "--policy", "template",
            "--kubeconfig", str(template_crd.kubeconfig), "--config-namespace", ns,
            "--nri-socket", str(nri), "--kubelet-plugins-dir", str(plugins),
            "--kubelet-registry-dir", str(registry), "--cdi-dir", str(short_dir / "cdi"),
            "--dra-state-dir", str(short_dir / "state")]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"} | {"NODE_NAME": node}
    kubelet = Kubelet(kubelet_stubs)
    stop = trio.Event()
    async with Simulator.listen(str(nri)) as sim, trio.open_nursery() as nursery:
        nursery.start_soon(discard_updates, sim)
        with log.open("wb") as out:
            proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=out, env=env,
                                    preexec_fn=lambda: limited(LIMIT))  # fmt: skip
        try:
            with trio.fail_after(GUARD):
                plugin = await sim.wait_plugin()
                while not (registry / f"{DRIVER}-reg.sock").exists():
                    await trio.sleep(0.05)
            baseline = open_descriptors(proc.pid)
            for _ in range(CLIENTS):
                nursery.start_soon(slow_client, port, stop)
            await trio.sleep(3)  # the daemon accepts what it will
            held = open_descriptors(proc.pid)
            assert held <= baseline + connection_cap(LIMIT) + 8, (baseline, held)

            # The runtime restarts: the daemon needs a new socket to re-register.
            plugin.close()
            with trio.fail_after(GUARD):
                await sim.wait_plugin()
            # kubelet dials both sockets afresh.
            info = await kubelet.get_info(registry / f"{DRIVER}-reg.sock")
            assert info.name == DRIVER
            reply = await kubelet.prepare("v1", kubelet.channel(info.endpoint), CLAIM)
            assert "not found" in reply.claims[CLAIM].error  # served: the apiserver was asked
            assert open_descriptors(proc.pid) < LIMIT - 32
        finally:
            stop.set()
            kubelet.close()
            proc.kill()
            proc.wait()
            nursery.cancel_scope.cancel()
    output = log.read_text(errors="replace")
    assert "Too many open files" not in output, output[-3000:]
    assert f"at most {connection_cap(LIMIT)} connections" in output
