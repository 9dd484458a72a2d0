"""A one-node Kubernetes cluster in the guest (``cluster.py``): the node registers and goes
Ready, and a pod scheduled by the real kube-scheduler runs on it through the real kubelet and
containerd. Results are read from the API server (kubectl in the guest) and the guest kernel.

Not in the core set: ``nox -s node`` (NRI_RESMGR_NODE_ALL=1) runs it. It boots a guest of its
own after the session's current one is powered off (two TCG guests would slow both).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.helm.helmbuild import HelmBuildError
from tests.node import chart
from tests.node.cluster import NODE_NAME, Cluster, condition, parse_cpus
from tests.node.guest import CGROUP
from tests.node.kubepods import container, delete_pod, hostnet_pod, run_pod
from tests.peers import missing_peer
from tests.runtime.build import PeerUnavailable

pytestmark = pytest.mark.node_cluster


def test_the_node_registers_and_goes_ready(cluster: Cluster) -> None:
    node = cluster.get("node", NODE_NAME)
    assert condition(node, "Ready") == "True"
    info = node["status"]["nodeInfo"]
    assert info["kubeletVersion"] == "v1.37.2"
    assert info["containerRuntimeVersion"] == "containerd://2.4.2"
    # The guest kernel's 16 CPUs, as kubelet's cAdvisor read them.
    assert node["status"]["capacity"]["cpu"] == "16"
    # kubelet runs as its node (system:node:<name>), judged by the Node authorizer: what it
    # reads for DRA (the pods' claims, its node's slices) is allowed, the rest of the cluster
    # not, as on a production node.
    node_user = (f"--as=system:node:{NODE_NAME}", "--as-group=system:nodes")
    can = cluster.kubectl("auth", "can-i", "list", "secrets", "--all-namespaces", *node_user,
                          check=False)  # fmt: skip
    assert can.startswith("no - node: "), can  # the Node authorizer's reason


def test_a_hostnetwork_pod_runs_where_the_kernel_shows_it(cluster: Cluster) -> None:
    pod = run_pod(
        cluster, "hostnet", hostnet_pod("hostnet", [container("hostnet", "250m", "24Mi")])
    )
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
    assert pod["spec"]["hostNetwork"] is True  # the chart's value, not a patch
    assert condition(pod, "Ready") == "True"  # readiness on /readyz, after the startupProbe
    status = pod["status"]["containerStatuses"][0]
    assert "running" in status["state"]
    probes = chart.probe_report(cluster, pod)
    print(f"the daemon's start: {probes}")
    # The chart's startupProbe gives a slow start minutes (without it kubelet restarted the
    # daemon 1-6 times here, under TCG, before one start answered in 3 x 10 s).
    assert status["restartCount"] == 0, (probes, chart.explain(cluster))


def test_a_guaranteed_pod_is_pinned_as_the_policy_says(cluster: Cluster) -> None:
    if not chart.daemonset_ready(cluster):
        pytest.fail("the chart's DaemonSet is not Ready (see the test before)")
    pod = run_pod(cluster, "guaranteed",
                  hostnet_pod("guaranteed", [container("guaranteed", "2", "64Mi")]))  # fmt: skip
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
    # Its exclusive CPUs back to the pool: a DRA claim may not take CPUs a container holds.
    delete_pod(cluster, "guaranteed")
