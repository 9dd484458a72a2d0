"""The daemon process in cluster mode against the real kube-apiserver: its NodeResourceTopology
object, readiness without a runtime, and a port in use refused into the CR status."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from nri_resmgr.kube import AlreadyExists, KubeClient, NotFound
from nri_resmgr.kube.resources import (
    CUSTOM_RESOURCE_DEFINITIONS,
    NAMESPACES,
    NODES,
    TOPOLOGY_AWARE_POLICIES,
)
from nri_resmgr.observability.nrt import NODE_RESOURCE_TOPOLOGIES
from nri_resmgr.sim.synthetic import N4C16, write_sysfs
from tests.agent.test_agent_integration import unique
from tests.kube.apiserver import ApiServer
from tests.kube.nrt_crd import nrt_crd
from tests.kube.test_apiserver_integration import ensure_tap_crd

pytestmark = pytest.mark.integration

GUARD = 60.0  # hang guard


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def established(client: KubeClient, document: dict[str, Any]) -> None:
    with contextlib.suppress(AlreadyExists):
        await client.create(CUSTOM_RESOURCE_DEFINITIONS, document)
    with trio.fail_after(GUARD):
        while True:
            got = await client.get(CUSTOM_RESOURCE_DEFINITIONS, document["metadata"]["name"])
            conditions = (got.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return
            await trio.sleep(0.1)


@pytest.fixture
async def cluster(apiserver: ApiServer) -> AsyncIterator[tuple[KubeClient, str, str]]:
    async with KubeClient(apiserver.config()) as client:
        # The permissive stand-in the kube tests share this apiserver with (same CRD name);
        # the daemon validates the CR itself.
        await ensure_tap_crd(client)
        await established(client, nrt_crd())
        namespace, node = unique("obs"), unique("node")
        await client.create(NAMESPACES, {"metadata": {"name": namespace}})
        await client.create(NODES, {"metadata": {"name": node}})
        yield client, namespace, node
        await client.delete(NODES, node)


def policy_cr(port: int) -> dict[str, Any]:
    return {"apiVersion": "config.nri/v1alpha1", "kind": "TopologyAwarePolicy",
            "metadata": {"name": "default"},
            "spec": {"reservedResources": {"cpu": "cpuset:0"},
                     "instrumentation": {"httpEndpoint": f"127.0.0.1:{port}",
                                         "prometheusExport": True}}}  # fmt: skip


async def until(fn: Any) -> Any:
    with trio.fail_after(GUARD):
        while True:
            with contextlib.suppress(NotFound, httpx.TransportError):
                got = await fn()
                if got:
                    return got
            await trio.sleep(0.05)


async def test_the_daemon_exports_its_nrt_and_reports_a_busy_port_in_the_cr_status(
    apiserver: ApiServer, cluster: tuple[KubeClient, str, str], tmp_path: Path
) -> None:
    client, ns, node = cluster
    port = free_port()
    await client.create(TOPOLOGY_AWARE_POLICIES, policy_cr(port), ns)
    host = write_sysfs(tmp_path / "host", N4C16)
    args = [sys.executable, "-m", "nri_resmgr", "--policy", "topology-aware",
            "--kubeconfig", str(apiserver.kubeconfig), "--config-namespace", ns,
            "--host-root", str(host), "--nri-socket", str(tmp_path / "no-such.sock")]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"} | {"NODE_NAME": node}
    log = tmp_path / "daemon.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=out, env=env)
    try:
        obj = await until(lambda: client.get(NODE_RESOURCE_TOPOLOGIES, node))
        # The node's config report rides on its NRT, in its first write (docs/fleet.md).
        assert obj["attributes"] == [
            {"name": "TopologyPolicy", "value": "topology-aware"},
            {"name": "topologyManagerPolicy", "value": "single-numa-node"},
            {"name": "topologyManagerScope", "value": "container"},
            {"name": "nri-resmgr.io/config", "value": f"TopologyAwarePolicy {ns}/default"},
            {"name": "nri-resmgr.io/config-generation", "value": "1"},
            {"name": "nri-resmgr.io/config-status", "value": "Success"},
        ]
        assert [z["name"] for z in obj["zones"]][:2] == ["root", "socket #0"]
        assert [z["name"] for z in obj["zones"] if z["type"] == "Node"] == [
            f"node-{n}" for n in range(4)
        ]
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=GUARD) as http:
            ready = await until(lambda: http.get("/readyz"))
            # No runtime to register with: alive, not ready, and saying why.
            assert (ready.status_code, ready.text) == (503, "not ready: nri\n")
            assert (await http.get("/healthz")).status_code == 200
            metrics = (await http.get("/metrics")).text
            assert "nri_resmgr_config_generation 1.0" in metrics

            with socket.socket() as taken:
                taken.bind(("127.0.0.1", 0))
                taken.listen()
                busy = taken.getsockname()[1]
                patch = {"spec": {"instrumentation": {"httpEndpoint": f"127.0.0.1:{busy}"}}}
                await client.patch(TOPOLOGY_AWARE_POLICIES, "default", patch, ns)

                async def failure() -> dict[str, Any] | None:
                    got = await client.get(TOPOLOGY_AWARE_POLICIES, "default", ns)
                    entry = ((got.get("status") or {}).get("nodes") or {}).get(node)
                    return entry if entry and entry["status"] == "Failure" else None

                entry = await until(failure)
            assert f"httpEndpoint: cannot listen on 127.0.0.1:{busy}" in entry["errors"]
            assert entry["generation"] == 2

            async def reported() -> dict[str, str] | None:
                got = await client.get(NODE_RESOURCE_TOPOLOGIES, node)
                attributes = {a["name"]: a["value"] for a in got["attributes"]}
                done = attributes.get("nri-resmgr.io/config-generation") == "2"
                return attributes if done else None

            attributes = await until(reported)
            assert attributes["nri-resmgr.io/config-status"] == "Failure"
            assert f"cannot listen on 127.0.0.1:{busy}" in attributes["nri-resmgr.io/config-errors"]
            # The old endpoint still serves, and the refusal is counted.
            metrics = (await http.get("/metrics")).text
            assert 'nri_resmgr_config_reloads_total{outcome="refused"} 1.0' in metrics
        assert proc.poll() is None, log.read_text()
    finally:
        proc.kill()
        proc.wait()
