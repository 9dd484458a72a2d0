"""The daemon in cluster mode with DRA enabled: kubelet plugin, ResourceSlice, fatal path.

A real daemon process, a real kube-apiserver, and grpcio acting as kubelet.
"""

from __future__ import annotations

import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from nri_resmgr.dra.kubeletplugin.publisher import resource_slices
from nri_resmgr.kube import KubeClient
from nri_resmgr.kube.resources import NODES, TEMPLATE_POLICIES
from tests.agent.test_agent_integration import cr
from tests.agent.test_process import admin, daemon  # noqa: F401  (fixture)
from tests.dra.conftest import kubelet_stubs  # noqa: F401  (fixture)
from tests.dra.kubelet_client import Kubelet, KubeletStubs
from tests.kube.apiserver import ApiServer

pytestmark = pytest.mark.integration

DRIVER = "template.nri.io"
SLICES = resource_slices("v1")
CLAIM_UID = "0b6f1c2e-9d4a-4e57-8a3b-2c1d5e6f7a80"


@pytest.fixture
def kubelet_dirs() -> Iterator[tuple[Path, Path]]:
    # Unix socket paths must stay short; pytest's tmp_path may be too long.
    root = Path(tempfile.mkdtemp(prefix="dra-proc-"))
    try:
        yield root / "plugins", root / "registry"
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def wait_path(path: Path, present: bool, timeout: float = 60) -> None:
    with trio.fail_after(timeout):
        while path.exists() != present:
            await trio.sleep(0.05)


async def wait_slice(client: KubeClient, node: str) -> dict[str, object]:
    with trio.fail_after(60):
        while True:
            found = await client.list(
                SLICES, field_selector=f"spec.nodeName={node},spec.driver={DRIVER}"
            )
            if found.items:
                return found.items[0]
            await trio.sleep(0.1)


async def test_dra_daemon_registers_serves_publishes_and_dies_when_its_socket_goes(
    template_crd: ApiServer,
    admin: tuple[KubeClient, str, str],  # noqa: F811
    kubelet_stubs: KubeletStubs,  # noqa: F811
    kubelet_dirs: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    client, ns, node = admin
    plugins, registry = kubelet_dirs
    reg_sock, dra_sock = registry / f"{DRIVER}-reg.sock", plugins / DRIVER / "dra.sock"
    await client.create(TEMPLATE_POLICIES, cr("default", "750m", dra={"enabled": True}), ns)
    args = ("--kubelet-plugins-dir", str(plugins), "--kubelet-registry-dir", str(registry),
            "--cdi-dir", str(tmp_path / "cdi"),
            "--dra-state-dir", str(tmp_path / "state"))  # fmt: skip
    kubelet = Kubelet(kubelet_stubs)
    try:
        with daemon(template_crd, ns, node, tmp_path, *args) as d:
            await wait_path(reg_sock, True)
            info = await kubelet.get_info(reg_sock)
            assert (info.type, info.name, info.endpoint) == ("DRAPlugin", DRIVER, str(dra_sock))
            await kubelet.notify(reg_sock, True)
            for version in ("v1", "v1beta1"):
                reply = await kubelet.prepare(version, kubelet.channel(dra_sock), CLAIM_UID)
                # Served, and per claim: the daemon asked the apiserver, which has no such claim.
                assert "not found" in reply.claims[CLAIM_UID].error
            published = await wait_slice(client, node)
            node_uid = (await client.get(NODES, node))["metadata"]["uid"]
            owner = published["metadata"]["ownerReferences"][0]  # type: ignore[index]
            assert (owner["kind"], owner["name"], owner["uid"]) == ("Node", node, node_uid)

            dra_sock.unlink()  # the server gave up: fatal, the same path as SIGTERM
            assert await d.wait_exit() == 1, d.output
            await wait_path(reg_sock, False, timeout=5)
    finally:
        kubelet.close()
    out = d.output
    assert "shutting down: dra failed" in out
    assert (
        out.index("stopping dra") < out.index("stopping config-agent") < out.index("stopping nri")
    )


async def test_sigterm_removes_both_kubelet_sockets_and_exits_0(
    template_crd: ApiServer,
    admin: tuple[KubeClient, str, str],  # noqa: F811
    kubelet_dirs: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    client, ns, node = admin
    plugins, registry = kubelet_dirs
    reg_sock, dra_sock = registry / f"{DRIVER}-reg.sock", plugins / DRIVER / "dra.sock"
    await client.create(TEMPLATE_POLICIES, cr("default", "750m", dra={"enabled": True}), ns)
    args = ("--kubelet-plugins-dir", str(plugins), "--kubelet-registry-dir", str(registry))
    with daemon(template_crd, ns, node, tmp_path, *args) as d:
        await wait_path(dra_sock, True)
        await wait_path(reg_sock, True)
        d.proc.send_signal(signal.SIGTERM)
        assert await d.wait_exit() == 0, d.output
    assert not reg_sock.exists() and not dra_sock.exists()
    assert "shutting down: received SIGTERM" in d.output


async def test_turning_dra_off_in_the_cluster_asks_for_a_restart(
    template_crd: ApiServer,
    admin: tuple[KubeClient, str, str],  # noqa: F811
    kubelet_dirs: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    client, ns, node = admin
    plugins, registry = kubelet_dirs
    await client.create(TEMPLATE_POLICIES, cr("default", "750m", dra={"enabled": True}), ns)
    args = ("--kubelet-plugins-dir", str(plugins), "--kubelet-registry-dir", str(registry))
    with daemon(template_crd, ns, node, tmp_path, *args) as d:
        await wait_path(registry / f"{DRIVER}-reg.sock", True)
        await client.patch(TEMPLATE_POLICIES, "default", {"spec": {"dra": {"enabled": False}}}, ns)
        with trio.fail_after(60):
            while True:
                got = await client.get(TEMPLATE_POLICIES, "default", ns)
                entry = ((got.get("status") or {}).get("nodes") or {}).get(node) or {}
                if entry.get("generation") == 2:
                    break
                await trio.sleep(0.1)
        assert entry["status"] == "Failure"
        assert "spec.dra.enabled: cannot disable DRA" in entry["errors"]
        assert "restart nri-resmgr" in entry["errors"]
        # The driver keeps serving: the old configuration stays in force.
        assert (registry / f"{DRIVER}-reg.sock").exists()
        d.proc.send_signal(signal.SIGTERM)
        assert await d.wait_exit() == 0, d.output
