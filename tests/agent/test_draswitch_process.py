"""DRA turned on by the policy (issue 38 item 3) in a real daemon process, cluster mode, against
the real kube-apiserver v1.37.2 (the published type's devices need consumable capacity), grpcio
acting as kubelet: a balloons CR whose balloon type has
``dra.publish: true`` and no ``dra.enabled`` starts the driver ``balloons.nri.io``, said once
with the key; a CR update removing the key is refused (a restart is needed) and the driver
keeps serving under the old configuration."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from nri_resmgr.kube import KubeClient
from nri_resmgr.kube.resources import BALLOONS_POLICIES
from tests.agent.test_dra_process import kubelet_dirs, wait_path  # noqa: F401  (fixture)
from tests.agent.test_process import admin_on, daemon
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
async def cluster(balloons_crd_137: ApiServer) -> AsyncIterator[tuple[KubeClient, str, str]]:
    # v1.37.2: the published type's devices are shared (consumable capacity), which a 1.35
    # API server drops, and the daemon stops naming the feature (publisher._check_kept).
    async with admin_on(balloons_crd_137) as found:
        yield found


async def node_entry(client: KubeClient, ns: str, node: str, generation: int) -> dict[str, Any]:
    with trio.fail_after(60):
        while True:
            got = await client.get(BALLOONS_POLICIES, "default", ns)
            entry: dict[str, Any] = ((got.get("status") or {}).get("nodes") or {}).get(node) or {}
            if entry.get("generation") == generation:
                return entry
            await trio.sleep(0.1)


async def test_a_publishing_balloon_type_turns_dra_on_and_removing_it_needs_a_restart(
    balloons_crd_137: ApiServer,
    cluster: tuple[KubeClient, str, str],
    kubelet_stubs: KubeletStubs,  # noqa: F811
    kubelet_dirs: tuple[Path, Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    client, ns, node = cluster
    plugins, registry = kubelet_dirs
    await client.create(BALLOONS_POLICIES, balloons_cr(publish=True), ns)
    reg_sock = registry / f"{DRIVER}-reg.sock"
    write_sysfs(tmp_path / "host", N4C16)
    args = ("--host-root", str(tmp_path / "host"),
            "--kubelet-plugins-dir", str(plugins), "--kubelet-registry-dir", str(registry),
            "--cdi-dir", str(tmp_path / "cdi"),
            "--dra-state-dir", str(tmp_path / "state"))  # fmt: skip
    kubelet = Kubelet(kubelet_stubs)
    try:
        with daemon(balloons_crd_137, ns, node, tmp_path, *args, policy="balloons") as d:
            await wait_path(reg_sock, True)
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
