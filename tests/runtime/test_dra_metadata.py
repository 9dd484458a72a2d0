"""Device metadata (KEP-5304) read from inside a container that the real containerd started.

Every part is real: kube-apiserver and kube-scheduler v1.37.2 (consumable capacity on by
default there), kubelet's own DRA manager (``kubelet-dra-peer``) at v1.35.4 (a kubelet two
minors older than its control plane, within the skew Kubernetes supports) and at v1.37.2 (or
all three at the version a nox session names), our daemon as a process
(topology-aware, NRI plugin of the containerd below, DRA on), and containerd 2.2.9 with CDI
on, reading the daemon's CDI directory. The scheduler allocates a 1-CPU claim on CPU 1
(per-CPU mode: device ``cpu1``; grouped mode: ``numa0`` with ``groupedCPUs: "1"``), kubelet
prepares it through our plugin and gets the CDI ids, and the container is created through
CRI with exactly those ids as ``CDI_devices``, as kubelet passes them. containerd applies the
CDI edits: the claim's env (the daemon pins the container to the claim's CPU) and the
metadata file's bind mount. The container's own command prints the file at the documented
path and then what k8s.io/dynamic-resource-allocation v0.37.2's ``devicemetadata`` package
(``dra-metadata-reader``, validation on) reads there; the test parses both from its log.

The daemon sees the synthetic n4c16 machine (``--host-root``): the policy reserves a CPU and
a claim must leave the shared pool one, which this 2-CPU machine cannot give. Its CPUs 0-3
(NUMA node 0) include this machine's 0 and 1, and the only container here is the claim's,
pinned to CPU 1 and memory node 0, which exist; no container gets a CPU above 1.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from nri_resmgr.dra.kubeletplugin.publisher import resource_slices
from nri_resmgr.kube import KubeClient
from nri_resmgr.kube.resources import (
    NODES,
    PODS,
    RESOURCE_CLAIMS,
    TOPOLOGY_AWARE_POLICIES,
)
from nri_resmgr.sim.synthetic import N4C16, write_sysfs
from tests.dra import chain
from tests.dra.kubelet_peer import KubeletPeer, kubelet_peer
from tests.dra.metadata_stream import VERSIONS, attributes, newest
from tests.dra.metadatabuild import BuildError, ensure_reader
from tests.dra.scheduler import Scheduler
from tests.dra.test_grouped_scheduler import capacity_claim, grouped_stack
from tests.dra.test_kubelet_real import kubelet_binary, node_dirs
from tests.instrumentation.test_cluster_process import established
from tests.kube.apiserver import ApiServer
from tests.peers import missing_peer
from tests.runtime.containerd import Containerd, wait_for
from tests.runtime.cri import GUARANTEED_1CPU, Container, Cri, placement
from tests.runtime.daemon import Daemon
from tools.crdschema import crd

__all__ = ["grouped_stack", "kubelet_binary", "node_dirs"]  # fixtures

pytestmark = pytest.mark.integration

DRIVER = "topology-aware.nri.io"
CLAIM_CPU = 1  # CPU 0 is reserved
READER = "/dra-metadata-reader"
MARK = "=== reader ==="
JSON = dict[str, Any]


@pytest.fixture(scope="module")
def reader() -> Path:
    try:
        return ensure_reader()
    except BuildError as exc:
        missing_peer(f"dra-metadata-reader cannot be built here: {exc}")


@attrs.define
class Node:
    mode: str
    dir: Path
    client: KubeClient
    ns: str
    name: str
    kubelet: KubeletPeer
    daemon: Daemon


def dra_config(mode: str) -> JSON:
    if mode == "grouped":
        return {"enabled": True, "cpuDeviceMode": "grouped", "groupedCPUs": str(CLAIM_CPU)}
    return {"enabled": True}


@pytest.fixture
async def node(
    request: pytest.FixtureRequest,
    grouped_stack: tuple[ApiServer, Scheduler],
    containerd: Containerd,
    kubelet_binary: Path,
    node_dirs: Path,
) -> AsyncIterator[Node]:
    """The cluster objects, kubelet and our daemon (DRA on, mode ``request.param``), the
    daemon registered with containerd's NRI and kubelet, its slice published."""
    grouped_apiserver, _ = grouped_stack  # the scheduler allocates the tests' claims
    async with KubeClient(grouped_apiserver.config()) as client:
        await established(client, crd("TopologyAwarePolicy"))
        suffix = uuid.uuid4().hex[:6]
        ns, name = f"dmeta-{suffix}", f"dmeta-node-{suffix}"
        await chain.scaffold(client, ns, name, DRIVER)
        spec = {"reservedResources": {"cpu": "cpuset:0"}, "dra": dra_config(request.param)}
        policy = {"apiVersion": "config.nri/v1alpha1", "kind": "TopologyAwarePolicy",
                  "metadata": {"name": "default"}, "spec": spec}  # fmt: skip
        await client.create(TOPOLOGY_AWARE_POLICIES, policy, ns)
        registry = node_dirs / "registry"
        registry.mkdir()
        args = ("--kubeconfig", str(grouped_apiserver.kubeconfig), "--config-namespace", ns,
                "--policy", "topology-aware", "--host-root", str(write_sysfs(node_dirs, N4C16)),
                "--kubelet-plugins-dir", str(node_dirs / "plugins"),
                "--kubelet-registry-dir", str(registry), "--cdi-dir", str(containerd.cdi_dir),
                "--dra-state-dir", str(node_dirs / "state"))  # fmt: skip
        daemon = Daemon(containerd, node_dirs, None, args, env={"NODE_NAME": name})
        daemon.env.pop("KUBECONFIG", None)
        async with kubelet_peer(kubelet_binary, kubeconfig=grouped_apiserver.kubeconfig, node=name,
                                registry=registry, state=node_dirs / "kubelet-state",
                                log=node_dirs / "kubelet.log") as kubelet:  # fmt: skip
            daemon.start()
            try:
                await kubelet.wait_plugin(DRIVER, timeout=60)
                await published(client, name)
                yield Node(request.param, node_dirs, client, ns, name, kubelet, daemon)
                assert daemon.terminate() == 0
            finally:
                daemon.kill()
                print(f"daemon log tail:\n{daemon.log_tail(60)}")
        # Its slice stays (no garbage collector here); without the Node nothing goes there.
        await client.delete(NODES, name)


async def published(client: KubeClient, node: str) -> list[JSON]:
    """Our slice's devices, once the daemon has published them."""
    selector = f"spec.nodeName={node},spec.driver={DRIVER}"
    with trio.fail_after(60):
        while True:
            for s in (await client.list(resource_slices("v1"), field_selector=selector)).items:
                if s["spec"].get("devices"):
                    return list(s["spec"]["devices"])
            await trio.sleep(0.1)


def claim_for(mode: str, name: str) -> JSON:
    """One CPU: of group ``numa0`` (grouped), or device ``cpu1`` by its ``cpuID``."""
    if mode == "grouped":
        return capacity_claim(name, 1, 0)
    selector = f'device.attributes["{DRIVER}"].cpuID == {CLAIM_CPU}'
    exactly = {"deviceClassName": DRIVER, "selectors": [{"cel": {"expression": selector}}]}
    requests = [{"name": "cpus", "exactly": exactly}]
    return {"metadata": {"name": name}, "spec": {"devices": {"requests": requests}}}


async def scheduled(n: Node, mode: str, name: str) -> tuple[JSON, JSON]:
    """Claim and pod created; (claim, pod) once the real scheduler allocated and bound."""
    await n.client.create(RESOURCE_CLAIMS, claim_for(mode, name), n.ns)
    await n.client.create(PODS, chain.pod(name, name, 1), n.ns)
    claim = await chain.allocated(n.client, n.ns, name)
    with trio.fail_after(30):
        while not (pod := await n.client.get(PODS, name, n.ns))["spec"].get("nodeName"):
            await trio.sleep(0.02)
    return claim, pod


def start_reading(cri: Cri, reader: Path, pod: JSON, claim: str, cdi_ids: list[str]) -> Container:
    """A container of the pod's sandbox, created through CRI with ``cdi_ids`` as kubelet
    passes them; its command prints the metadata file, then the upstream reader's view."""
    path = f"/var/run/kubernetes.io/dra-device-attributes/resourceclaims/{claim}/cpus/"
    path += f"{DRIVER}-metadata.json"
    script = (f"cat {path}; echo '{MARK}'; {READER} resourceclaims {DRIVER} {claim} cpus; "
              f"echo '{MARK}'; exec sleep 3600")  # fmt: skip
    meta = pod["metadata"]
    pod_id, pod_config = cri.pod(meta["name"], GUARANTEED_1CPU.qos, meta["namespace"], meta["uid"])
    extra = {"CDI_devices": [{"name": i} for i in cdi_ids],
             "mounts": [{"container_path": READER, "host_path": str(reader),
                         "readonly": True}]}  # fmt: skip
    return cri.container(pod_id, pod_config, "app", GUARANTEED_1CPU, extra=extra,
                         command=("/bin/sh", "-c", script))  # fmt: skip


def container_output(containerd: Containerd, c: Container) -> tuple[str, JSON]:
    """(the file as the container printed it, the reader's JSON), once both are logged."""
    text = ""

    def done() -> bool:
        nonlocal text
        text = containerd.crictl("logs", c.id)
        return text.count(MARK) == 2

    try:
        wait_for("the container to print the metadata file", done)
    except TimeoutError:
        pytest.fail(f"the container did not print both parts; its log:\n{text}")
    print(f"logged by container {c.id[:12]}:\n{text}")  # the evidence, shown with -rP
    raw, read, _ = text.split(MARK + "\n")
    return raw, json.loads(read)


@pytest.mark.parametrize("node", ["per-cpu", "grouped"], indirect=True)
async def test_the_container_reads_its_claims_device_metadata_at_the_documented_path(
    node: Node, containerd: Containerd, cri: Cri, reader: Path
) -> None:
    mode = node.mode
    devices = await published(node.client, node.name)
    expected_device = "numa0" if mode == "grouped" else f"cpu{CLAIM_CPU}"
    assert expected_device in [d["name"] for d in devices]

    claim, pod = await scheduled(node, mode, "meta")
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"], result["device"]) == (DRIVER, node.name,
                                                                    expected_device)  # fmt: skip
    uid = claim["metadata"]["uid"]
    prepared = await node.kubelet.prepare(pod)
    ids = prepared["cdi_devices"]["app"]
    metadata_id = f"{DRIVER}/metadata={uid}_cpus"
    assert sorted(ids) == sorted([f"{DRIVER}/cpu=claim-{uid}", metadata_id])

    app = start_reading(cri, reader, pod, "meta", ids)
    raw, read = container_output(containerd, app)

    # The file as the container sees it: the claim, its request, our driver and the device
    # with its topology, in both API versions (v1beta1 first).
    doc = newest(raw)
    assert doc["metadata"] == {"name": "meta", "namespace": node.ns, "uid": uid, "generation": 1}
    [request] = doc["requests"]
    assert request["name"] == "cpus"
    [device] = request["devices"]
    assert (device["driver"], device["pool"], device["name"]) == (DRIVER, node.name,
                                                                  expected_device)  # fmt: skip
    seen = attributes(device)
    assert seen["numaNode"] == 0 and seen["resource.kubernetes.io/numaNode"] == 0
    if mode == "grouped":
        assert (seen["numaNodeID"], seen["numCPUs"], seen["socketID"]) == (0, 1, 0)
        assert (seen["allocatedNumCPUs"], seen["allocatedCPUs"]) == (1, [CLAIM_CPU])
        assert result["consumedCapacity"] == {"cpu": "1"}
    else:  # n4c16: CPUs 0 and 1 are the threads of core 0, socket 0
        assert (seen["cpuID"], seen["coreID"], seen["socketID"]) == (CLAIM_CPU, 0, 0)
    # What upstream's consumer package reads there: every object valid, v1beta1 taken.
    assert read["path"].endswith(f"/resourceclaims/meta/cpus/{DRIVER}-metadata.json")
    assert read["read"] == {"requests": 1}
    assert [(o["apiVersion"], o["validation"]) for o in read["objects"]] == [
        (version, "") for version in VERSIONS
    ]
    decoded = read["decoded"]
    assert (decoded["apiVersion"], decoded["validation"]) == (VERSIONS[0], "")
    assert decoded["metadata"]["requests"] == doc["requests"]
    # The CPU the file names is the one the kernel runs the container on (our NRI plugin
    # bound it to the claim through the env the same CDI ids injected).
    assert placement(app).cpus == str(CLAIM_CPU)

    # Unprepare after the pod is gone: the file and both CDI specs go.
    cri.remove_pod(app.pod_id)
    await node.kubelet.unprepare(pod)
    assert not [p.name for p in containerd.cdi_dir.iterdir() if uid in p.name]
    assert not list((node.dir / "plugins" / DRIVER / "dra-device-metadata").glob(f"{uid}_*"))
    await chain.release(node.client, node.ns, "meta", "meta")
