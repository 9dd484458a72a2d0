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
from typing import Any

import pytest

from tests.helm.helmbuild import HelmBuildError
from tests.kube.gobuild import BuildError
from tests.node import chart
from tests.node.cluster import (
    NODE_NAME,
    Cluster,
    condition,
    ensure_cluster_binaries,
    parse_cpus,
)
from tests.node.guest import CGROUP, Guest, GuestError
from tests.node.node import Node
from tests.node.session import Nodes
from tests.peers import missing_peer
from tests.policies.topology_aware_e2e.topologies import N4C16
from tests.runtime.build import PeerUnavailable
from tests.runtime.ociimage import IMAGE_NAME

pytestmark = pytest.mark.node_cluster


def hostnet_pod(name: str, cpu: str, memory: str) -> str:
    """A Guaranteed hostNetwork pod of the test image (no pod network: docs/development.md)."""
    return f"""\
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  hostNetwork: true
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  containers:
  - name: {name}
    image: {IMAGE_NAME}
    imagePullPolicy: Never
    command: ["/bin/sleep", "3600"]
    resources:
      requests: {{cpu: "{cpu}", memory: {memory}}}
      limits: {{cpu: "{cpu}", memory: {memory}}}
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


def run_pod(cluster: Cluster, name: str, cpu: str, memory: str) -> dict[str, Any]:
    """``hostnet_pod`` applied and waited for until its container runs; the pod."""
    cluster.apply(hostnet_pod(name, cpu, memory))
    started = time.monotonic()
    cluster.wait(f"pod {name} to run", lambda: running(cluster, name),
                 explain=lambda: cluster.describe("pod", name))  # fmt: skip
    cluster.timings[f"pod {name} to running"] = time.monotonic() - started
    return cluster.get("pod", name, namespace="default")


def running(cluster: Cluster, name: str) -> bool:
    pod = cluster.try_get("pod", name, namespace="default")
    if pod is None:
        return False
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
    pod = run_pod(cluster, "hostnet", "250m", "24Mi")
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


def test_the_chart_installs_and_its_daemonset_pod_becomes_ready(
    cluster: Cluster, tmp_path: Path
) -> None:
    try:
        chart.install_chart(cluster, tmp_path)
    except (PeerUnavailable, HelmBuildError) as e:
        missing_peer(f"the image or helm cannot be built: {e}")
    started = time.monotonic()
    cluster.wait("the DaemonSet's pod to be Ready", lambda: chart.daemonset_ready(cluster),
                 explain=lambda: chart.explain(cluster))  # fmt: skip
    cluster.timings["DaemonSet Ready"] = time.monotonic() - started
    (pod,) = cluster.get("pods", namespace=chart.NAMESPACE, selector=chart.SELECTOR)["items"]
    assert pod["spec"]["hostNetwork"] is True
    assert condition(pod, "Ready") == "True"  # the chart's readinessProbe on /readyz
    status = pod["status"]["containerStatuses"][0]
    assert "running" in status["state"]
    if status["restartCount"]:
        # Not failed on: under TCG the daemon may start slower than the chart's liveness
        # probe allows (3 x 10 s), and kubelet restarts it once. Said, so that it is seen.
        print(
            f"the daemon restarted {status['restartCount']}x, last: {status['lastState']}\n"
            + cluster.describe("pods", "-n", chart.NAMESPACE, "-l", chart.SELECTOR)
        )


def test_a_guaranteed_pod_is_pinned_as_the_policy_says(cluster: Cluster) -> None:
    if not chart.daemonset_ready(cluster):
        pytest.fail("the chart's DaemonSet is not Ready (see the test before)")
    pod = run_pod(cluster, "guaranteed", "2", "64Mi")
    kernel = cluster.container_placement(pod)
    cpus = parse_cpus(kernel.cpus)
    # topology-aware: two exclusive CPUs (one core's threads) within one NUMA node, and with
    # pinMemory that node's memory.
    assert len(cpus) == 2, kernel
    nodes = cluster.numa_nodes()
    (home,) = [n for n, node_cpus in nodes.items() if cpus <= node_cpus]
    assert kernel.mems == str(home), kernel
    assert kernel.cpus_allowed == kernel.cpus and kernel.mems_allowed == kernel.mems
    (ours,) = cluster.get("pods", namespace=chart.NAMESPACE, selector=chart.SELECTOR)["items"]
    daemon = cluster.container_placement(ours)
    assert not cpus & parse_cpus(daemon.cpus), (kernel, daemon)
    print(f"guaranteed: {kernel}; the daemon: {daemon}")
