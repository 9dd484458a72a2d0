"""``helm upgrade`` and ``helm uninstall`` of the chart on the guest's cluster, after
``test_cluster.py`` installed it and ``test_cluster_dra.py`` used it: a changed config moves
containers (read from the guest kernel), and an uninstall leaves the running containers where
they are and removes every object the chart made (read from the API server).

Not in the core set: ``nox -s node`` (NRI_RESMGR_NODE_ALL=1) runs it.
"""

from __future__ import annotations

import time

import pytest
import yaml

from tests.node import chart
from tests.node.cluster import Cluster, parse_cpus
from tests.node.kubepods import placement_of

pytestmark = pytest.mark.node_cluster

RESERVED = "2250m"  # from the chart's 750m: three CPUs instead of one


def daemon_cpus(cluster: Cluster) -> frozenset[int] | None:
    pods = cluster.try_get("pods", namespace=chart.NAMESPACE, selector=chart.SELECTOR)
    if not pods or len(pods["items"]) != 1:
        return None
    (pod,) = pods["items"]
    if not pod["status"].get("containerStatuses"):
        return None
    return parse_cpus(cluster.container_placement(pod).cpus)


def shared_cpus(cluster: Cluster) -> frozenset[int]:
    pod = cluster.get("pod", "hostnet", namespace="default")
    return parse_cpus(placement_of(cluster, pod, "hostnet").cpus)


def test_helm_upgrade_with_more_reserved_cpus_moves_containers(cluster: Cluster) -> None:
    if not chart.daemonset_ready(cluster):
        pytest.fail("the chart's DaemonSet is not Ready (see test_cluster.py)")
    before = daemon_cpus(cluster)
    assert before is not None
    started = time.monotonic()
    cluster.helm("upgrade", chart.RELEASE, f"/opt/charts/{chart.CHART.name}", "--namespace",
                 chart.NAMESPACE, "--reuse-values", "--set",
                 f"config.reservedResources.cpu={RESERVED}", "--timeout=10m")  # fmt: skip
    cr = cluster.get(chart.CR_KIND, "default", namespace=chart.NAMESPACE)
    assert cr["spec"]["reservedResources"]["cpu"] == RESERVED
    # The daemon (kube-system: the reserved CPUs) is moved by the daemon itself, live.
    cluster.wait("the daemon's cpuset to grow with the reserved CPUs",
                 lambda: len(daemon_cpus(cluster) or before) > len(before),
                 timeout=600, explain=lambda: chart.explain(cluster))  # fmt: skip
    cluster.timings["helm upgrade to the kernel's new cpusets"] = time.monotonic() - started
    after = daemon_cpus(cluster)
    assert after is not None
    shared = shared_cpus(cluster)
    assert not shared & after, (shared, after)
    print(
        f"helm upgrade reservedResources.cpu 750m -> {RESERVED}: the daemon's cpus "
        f"{sorted(before)} -> {sorted(after)}; hostnet {sorted(shared)}"
    )


def test_helm_uninstall_leaves_containers_and_removes_what_the_chart_made(
    cluster: Cluster,
) -> None:
    manifest = cluster.helm("get", "manifest", chart.RELEASE, "--namespace", chart.NAMESPACE)
    made = [(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace", ""))
            for d in yaml.safe_load_all(manifest) if d]  # fmt: skip
    assert ("DaemonSet", chart.DAEMONSET, chart.NAMESPACE) in made
    shared = shared_cpus(cluster)
    started = time.monotonic()
    cluster.helm("uninstall", chart.RELEASE, "--namespace", chart.NAMESPACE, "--wait",
                 "--timeout=10m")  # fmt: skip
    cluster.wait("the daemon's pod to be gone", lambda: daemon_gone(cluster))
    cluster.timings["helm uninstall to the pod gone"] = time.monotonic() - started
    left = [(kind, name) for kind, name, ns in made if exists(cluster, kind, name, ns)]
    assert left == [], left
    # The running container stays where the daemon put it.
    assert shared_cpus(cluster) == shared
    # The slices are the Node's, not the release's: kubelet deletes them once the driver
    # has been unregistered for 30 s, so the scheduler no longer offers a gone driver's CPUs.
    started = time.monotonic()
    cluster.wait("kubelet to delete the gone driver's ResourceSlices",
                 lambda: driver_slices(cluster) == [], timeout=300)  # fmt: skip
    cluster.timings["uninstall to the slices deleted"] = time.monotonic() - started
    print(f"helm uninstall: removed {made}; hostnet kept cpus {sorted(shared)}")


def driver_slices(cluster: Cluster) -> list[str] | None:
    slices = cluster.try_get("resourceslices")
    if slices is None:
        return None
    return [s["metadata"]["name"] for s in slices["items"] if s["spec"]["driver"] == chart.DRIVER]


def daemon_gone(cluster: Cluster) -> bool:
    pods = cluster.try_get("pods", namespace=chart.NAMESPACE, selector=chart.SELECTOR)
    return pods is not None and not pods["items"]


def exists(cluster: Cluster, kind: str, name: str, namespace: str) -> bool:
    args = [f"--namespace={namespace}"] if namespace else []
    out = cluster.kubectl("get", kind, name, "--ignore-not-found", "-o", "name", *args)
    return bool(out.strip())
