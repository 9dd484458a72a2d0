"""Our DRA driver (the daemon, a real process) against kubelet's own code and a real apiserver.

``kubelet-dra-peer`` is kubelet's plugin manager and DRA manager (k8s.io/kubernetes), wired
as kubelet wires them: it finds our registration socket, calls GetInfo, chooses the service
version, sends NotifyRegistrationStatus, and prepares and unprepares the claims of a pod,
which it reads from the apiserver. A kubelet restart wipes the node's ResourceSlices; our
SIGTERM must deregister the driver.

Run at the oldest and the newest Kubernetes supported (v1.35.4 and v1.37.2: kubelet and API
server of one version, the session's two servers), or at the version a nox session names
(``tests/kube/versions.py``).
"""

from __future__ import annotations

import shutil
import signal
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from nri_resmgr.dra.kubeletplugin.publisher import resource_slices
from nri_resmgr.kube import KubeClient
from nri_resmgr.kube.resources import RESOURCE_CLAIMS, TEMPLATE_POLICIES
from tests.agent.conftest import with_template_crd
from tests.agent.test_agent_integration import cr
from tests.agent.test_process import admin, daemon  # noqa: F401  (fixture)
from tests.conformance.peer import HarnessError
from tests.dra.kubelet_peer import kubelet_peer, peer_binary
from tests.kube.apiserver import ApiServer

pytestmark = pytest.mark.integration

DRIVER = "template.nri.io"
SLICES = resource_slices("v1")


@pytest.fixture
def kubelet_binary(kube_version: str) -> Path:
    """The kubelet DRA peer of the version the test runs at (built once per version)."""
    return peer_binary(kube_version)


@pytest.fixture
def template_crd(kube_apiserver: ApiServer) -> ApiServer:
    """This module's API server (``admin`` and the daemon use it): the session's one of the
    test's version, with the TemplatePolicy CRD."""
    return with_template_crd(kube_apiserver)


@pytest.fixture
def node_dirs() -> Iterator[Path]:
    # Unix socket paths must stay short; pytest's tmp_path may be too long.
    root = Path(tempfile.mkdtemp(prefix="kubelet-"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def slices(client: KubeClient, node: str) -> list[dict[str, Any]]:
    found = await client.list(SLICES, field_selector=f"spec.nodeName={node},spec.driver={DRIVER}")
    return list(found.items)


async def wait_for_slice(client: KubeClient, node: str, not_named: str = "") -> dict[str, Any]:
    # A guard of 60 s: after a kubelet restart a wipe that lands after the re-publication
    # is repaired when the publisher's watch sees the DELETED (no periodic re-list).
    with trio.fail_after(60):
        while True:
            found = [s for s in await slices(client, node) if s["metadata"]["name"] != not_named]
            if found:
                return found[0]
            await trio.sleep(0.2)


async def allocated_claim(client: KubeClient, ns: str, node: str, pod: dict[str, Any]) -> str:
    """A ResourceClaim allocated to our driver and reserved for ``pod``, as the scheduler
    leaves it; returns its name."""
    name = f"claim-{uuid.uuid4().hex[:6]}"
    claim = await client.create(RESOURCE_CLAIMS, {
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [
            {"name": "cpu", "exactly": {"deviceClassName": DRIVER}}]}},
    }, ns)  # fmt: skip
    claim["status"] = {
        "allocation": {"devices": {"results": [
            {"request": "cpu", "driver": DRIVER, "pool": node, "device": "cpu-0"}]}},
        "reservedFor": [{"resource": "pods", "name": pod["metadata"]["name"],
                         "uid": pod["metadata"]["uid"]}],
    }  # fmt: skip
    await client.replace(RESOURCE_CLAIMS, claim, ns, subresource="status")
    return name


def pod_using(ns: str, claim: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "app", "namespace": ns, "uid": str(uuid.uuid4())},
        "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "cpu"}]}}],
            "resourceClaims": [{"name": "cpu", "resourceClaimName": claim}],
        },
    }


async def test_kubelets_own_code_registers_prepares_rewipes_and_deregisters(
    template_crd: ApiServer,
    admin: tuple[KubeClient, str, str],  # noqa: F811
    kubelet_binary: Path,
    node_dirs: Path,
    tmp_path: Path,
) -> None:
    client, ns, node = admin
    plugins, registry, state = node_dirs / "plugins", node_dirs / "registry", node_dirs / "state"
    registry.mkdir()
    dra_sock = plugins / DRIVER / "dra.sock"
    await client.create(TEMPLATE_POLICIES, cr("default", "750m", dra={"enabled": True}), ns)
    kubelet_args: dict[str, Any] = {"kubeconfig": template_crd.kubeconfig, "node": node,
                                    "registry": registry, "state": state,
                                    "log": tmp_path / "kubelet.log"}  # fmt: skip
    args = ("--kubelet-plugins-dir", str(plugins), "--kubelet-registry-dir", str(registry),
            "--cdi-dir", str(node_dirs / "cdi"), "--dra-state-dir", str(state))  # fmt: skip
    async with kubelet_peer(kubelet_binary, **kubelet_args) as kubelet:
        with daemon(template_crd, ns, node, tmp_path, *args) as d:
            # Discovery, GetInfo and the version choice, by kubelet's plugin manager.
            plugin = await kubelet.wait_plugin(DRIVER)
            assert (plugin["endpoint"], plugin["service"]) == (str(dra_sock), "v1.DRAPlugin")
            # NotifyRegistrationStatus(true) reached the daemon.
            await d.wait_logged(f"kubelet registered DRA driver {DRIVER}")
            first = await wait_for_slice(client, node)

            # Claims kubelet reads from the apiserver, prepared and unprepared through us.
            pod = pod_using(ns, "")
            pod["spec"]["resourceClaims"][0]["resourceClaimName"] = await allocated_claim(
                client, ns, node, pod
            )
            # The template policy offers no devices: the claim's device is refused by name,
            # and kubelet reports our per-claim error.
            with pytest.raises(HarnessError, match=r"unknown device\(s\) cpu-0: driver "):
                await kubelet.prepare(pod)
            await kubelet.unprepare(pod)  # a claim never prepared here: success

            # kubelet restarts: its start-up wipes the node's slices; we register again and
            # the slice is published anew.
            await kubelet.aclose()
            async with kubelet_peer(kubelet_binary, **kubelet_args) as restarted:
                plugin = await restarted.wait_plugin(DRIVER)
                assert plugin["service"] == "v1.DRAPlugin"
                again = await wait_for_slice(client, node, not_named=first["metadata"]["name"])
                assert again["spec"]["pool"]["name"] == node
                assert len(await slices(client, node)) == 1

                # SIGTERM: both sockets go, and kubelet deregisters the driver.
                d.proc.send_signal(signal.SIGTERM)
                assert await d.wait_exit() == 0, d.output
                gone = await restarted.wait_plugin(DRIVER, present=False)
                assert gone["registered"] is False
    assert "shutting down: received SIGTERM" in d.output
