"""DRA turned on by the policy (issue 38 item 3) in a real daemon process, cluster mode, against
the real kube-apiserver, grpcio acting as kubelet: a balloons CR whose balloon type has
``dra.publish: true`` and no ``dra.enabled`` starts the driver ``balloons.nri.io``, said once
with the key; a CR update removing the key is refused (a restart is needed) and the driver
keeps serving under the old configuration."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from nri_resmgr.kube import KubeClient
from nri_resmgr.kube.resources import BALLOONS_POLICIES, NAMESPACES, NODES
from tests.agent.test_agent_integration import unique
from tests.agent.test_process import Daemon
from tests.dra.conftest import kubelet_stubs  # noqa: F401  (fixture)
from tests.dra.kubelet_client import Kubelet, KubeletStubs
from tests.kube.apiserver import ApiServer
from tests.sysfs.fakesys import N4C16, write_sysfs

pytestmark = pytest.mark.integration

DRIVER = "balloons.nri.io"
KEY = "spec.balloonTypes[0].dra.publish"


def balloons_cr(publish: bool) -> dict[str, Any]:
    return {"apiVersion": "config.nri/v1alpha1", "kind": "BalloonsPolicy",
            "metadata": {"name": "default"},
            "spec": {"reservedResources": {"cpu": "1"},
                     "balloonTypes": [{"name": "claimed", "maxCPUs": 4,
                                       "dra": {"publish": publish}}]}}  # fmt: skip


@pytest.fixture
async def cluster(balloons_crd: ApiServer) -> AsyncIterator[tuple[KubeClient, str, str]]:
    async with KubeClient(balloons_crd.config()) as client:
        namespace, node = unique("draon"), unique("node")
        await client.create(NAMESPACES, {"metadata": {"name": namespace}})
        await client.create(NODES, {"metadata": {"name": node}})
        yield client, namespace, node
        await client.delete(NODES, node)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # Unix socket paths must stay short; pytest's tmp_path may be too long.
    root = Path(tempfile.mkdtemp(prefix="draon-"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def balloons_daemon(
    server: ApiServer, namespace: str, node: str, root: Path, tmp_path: Path
) -> Iterator[Daemon]:
    write_sysfs(tmp_path / "host", N4C16)
    log = tmp_path / "daemon.log"
    args = [sys.executable, "-m", "nri_resmgr", "--policy", "balloons",
            "--kubeconfig", str(server.kubeconfig), "--config-namespace", namespace,
            "--host-root", str(tmp_path / "host"),
            "--nri-socket", str(tmp_path / "no-such.sock"),
            "--kubelet-plugins-dir", str(root / "plugins"),
            "--kubelet-registry-dir", str(root / "registry"),
            "--cdi-dir", str(tmp_path / "cdi"),
            "--dra-state-dir", str(tmp_path / "state")]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"} | {"NODE_NAME": node}
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=out, env=env)
    try:
        yield Daemon(proc, log)
    finally:
        proc.kill()
        proc.wait()


async def node_entry(client: KubeClient, ns: str, node: str, generation: int) -> dict[str, Any]:
    with trio.fail_after(60):
        while True:
            got = await client.get(BALLOONS_POLICIES, "default", ns)
            entry: dict[str, Any] = ((got.get("status") or {}).get("nodes") or {}).get(node) or {}
            if entry.get("generation") == generation:
                return entry
            await trio.sleep(0.1)


async def wait_path(path: Path, timeout: float = 60) -> None:
    with trio.fail_after(timeout):
        while not path.exists():
            await trio.sleep(0.05)


async def test_a_publishing_balloon_type_turns_dra_on_and_removing_it_needs_a_restart(
    balloons_crd: ApiServer,
    cluster: tuple[KubeClient, str, str],
    kubelet_stubs: KubeletStubs,  # noqa: F811
    short_dir: Path,
    tmp_path: Path,
) -> None:
    client, ns, node = cluster
    await client.create(BALLOONS_POLICIES, balloons_cr(publish=True), ns)
    reg_sock = short_dir / "registry" / f"{DRIVER}-reg.sock"
    kubelet = Kubelet(kubelet_stubs)
    try:
        with balloons_daemon(balloons_crd, ns, node, short_dir, tmp_path) as d:
            await wait_path(reg_sock)
            info = await kubelet.get_info(reg_sock)
            assert (info.type, info.name) == ("DRAPlugin", DRIVER)
            assert (await node_entry(client, ns, node, 1))["status"] == "Success"

            # A merge patch replaces the list: the type without publish.
            await client.patch(BALLOONS_POLICIES, "default",
                               {"spec": balloons_cr(publish=False)["spec"]}, ns)  # fmt: skip
            entry = await node_entry(client, ns, node, 2)
            assert entry["status"] == "Failure"
            assert f"{KEY}: cannot disable DRA on a running daemon" in entry["errors"]
            assert "restart nri-resmgr" in entry["errors"]
            assert reg_sock.exists()  # still the driver: the old configuration stays
            assert (await kubelet.get_info(reg_sock)).name == DRIVER
            d.proc.send_signal(signal.SIGTERM)
            assert await d.wait_exit() == 0, d.output
    finally:
        kubelet.close()
    said = f"DRA support is enabled: {KEY} asks for devices and dra.enabled is unset"
    assert d.output.count(said) == 1, d.output
    assert "DRA support is disabled" not in d.output
