"""A one-node Kubernetes cluster in the guest (``cluster.py``): the node registers and goes
Ready, and a pod scheduled by the real kube-scheduler runs on it through the real kubelet and
containerd. Results are read from the API server (kubectl in the guest) and the guest kernel.

Not in the core set: ``nox -s node`` (NRI_RESMGR_NODE_ALL=1) runs it. It boots a guest of its
own after the session's current one is powered off (two TCG guests would slow both).
"""

from __future__ import annotations

import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kube.gobuild import BuildError
from tests.node.cluster import (
    NODE_NAME,
    Cluster,
    condition,
    ensure_cluster_binaries,
)
from tests.node.guest import CGROUP, Guest, GuestError
from tests.node.node import Node
from tests.node.session import Nodes
from tests.peers import missing_peer
from tests.policies.topology_aware_e2e.topologies import N4C16
from tests.runtime.build import PeerUnavailable
from tests.runtime.ociimage import IMAGE_NAME

pytestmark = pytest.mark.node_cluster

HOSTNET_POD = f"""\
apiVersion: v1
kind: Pod
metadata: {{name: hostnet, namespace: default}}
spec:
  hostNetwork: true
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  containers:
  - name: sleeper
    image: {IMAGE_NAME}
    imagePullPolicy: Never
    command: ["/bin/sleep", "3600"]
    resources:
      requests: {{cpu: 250m, memory: 24Mi}}
      limits: {{cpu: 250m, memory: 24Mi}}
"""


@pytest.fixture(scope="module")
def cluster(nodes: Nodes) -> Iterator[Cluster]:
    nodes.close()  # one guest at a time
    started = time.monotonic()
    try:
        binaries = ensure_cluster_binaries()
    except BuildError as e:
        missing_peer(f"the cluster's Kubernetes binaries cannot be built: {e}")
    built = time.monotonic() - started
    workdir = Path(f"/tmp/nrc-{secrets.token_hex(3)}")
    workdir.mkdir()
    guest: Guest | None = None
    try:
        try:
            guest = Guest.start(N4C16, workdir)
            node = Node.install(guest)
            node.start_containerd()
            node.import_image()
        except (PeerUnavailable, GuestError, TimeoutError) as e:
            missing_peer(f"the cluster guest could not be built or booted: {e}")
        made = Cluster.start(guest, node, binaries, workdir / "pki")
        made.timings = {"binaries": built, "boot to agent": guest.boot_seconds,
                        **node_timings(node), **made.timings}  # fmt: skip
        yield made
        print("cluster timings: " + ", ".join(f"{k} {v:.0f}s" for k, v in made.timings.items()))
    finally:
        if guest is not None:
            guest.shutdown()
        shutil.rmtree(workdir, ignore_errors=True)


def node_timings(node: Node) -> dict[str, float]:
    return {what: sum(t) for what, t in node.timings.items()}


def running(cluster: Cluster, name: str) -> bool:
    pod = cluster.get("pod", name, namespace="default")
    statuses = pod["status"].get("containerStatuses", [])
    return bool(statuses) and "running" in statuses[0]["state"]


def test_the_node_registers_and_goes_ready(cluster: Cluster) -> None:
    node = cluster.get("node", NODE_NAME)
    assert condition(node, "Ready") == "True"
    info = node["status"]["nodeInfo"]
    assert info["kubeletVersion"] == "v1.37.2"
    assert info["containerRuntimeVersion"] == "containerd://2.4.2"
    # The guest kernel's 16 CPUs, as kubelet's cAdvisor read them.
    assert node["status"]["capacity"]["cpu"] == "16"


def test_a_hostnetwork_pod_runs_where_the_kernel_shows_it(cluster: Cluster) -> None:
    cluster.apply(HOSTNET_POD)
    started = time.monotonic()
    cluster.wait("pod hostnet to run", lambda: running(cluster, "hostnet"),
                 explain=lambda: cluster.describe("pod", "hostnet"))  # fmt: skip
    cluster.timings["hostNetwork pod to running"] = time.monotonic() - started
    pod = cluster.get("pod", "hostnet", namespace="default")
    assert pod["spec"]["nodeName"] == NODE_NAME  # bound by kube-scheduler
    assert pod["status"]["qosClass"] == "Guaranteed"
    assert condition(pod, "Ready") == "True"
    assert pod["status"]["podIP"] == "127.0.0.1"  # the node's address, its loopback
    # The kernel: the container's cgroup (cgroupfs driver, kubepods/pod<uid>/<id>) holds the
    # sleep and has the CPU quota and memory limit kubelet asked containerd for.
    cgroup = f"{CGROUP}{cluster.container_placement(pod).cgroup}"
    assert cluster.guest.read(f"{cgroup}/memory.max").strip() == str(24 << 20)
    assert cluster.guest.read(f"{cgroup}/cpu.max").split() == ["25000", "100000"]
    pids = cluster.guest.read(f"{cgroup}/cgroup.procs").split()
    commands = [cluster.guest.read(f"/proc/{pid}/cmdline").split("\0")[0] for pid in pids]
    assert "/bin/sleep" in commands
