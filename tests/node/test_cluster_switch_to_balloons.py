"""The guest's node switched from topology-aware to balloons, as an operator does it: after
``test_cluster_helm.py`` uninstalled the topology-aware chart, the balloons chart is installed
with one balloon type published as DRA devices (issue 38) and ``dra.enabled`` left unset, so
the published type turns DRA on. The type's devices appear in the node's ResourceSlice, one per
NUMA node; a claim for a balloon of that type is allocated by kube-scheduler, prepared by
kubelet through the daemon's plugin, and its container runs in a balloon of its own: exactly
the consumed CPUs, inside the device's NUMA node, with that node's memory. Read from the API
server and the guest kernel, never from the daemon.

Not in the core set: ``nox -s node`` (NRI_RESMGR_NODE_ALL=1) runs it, last of the cluster's.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.node import chart, claims
from tests.node.chart import BALLOONS
from tests.node.cluster import NODE_NAME, Cluster, condition, parse_cpus
from tests.node.kubepods import container, delete_pod, environ, hostnet_pod, placement_of, run_pod

pytestmark = pytest.mark.node_cluster

DRIVER = BALLOONS.driver
TYPE = "fast"
VALUES_FILE = "/opt/charts/balloons-values.yaml"
# The chart's default configuration, with one more balloon type that offers balloons to
# claims; no dra.enabled: the published type asks for DRA, and the chart and daemon follow.
CONFIG = {
    "reservedResources": {"cpu": "1000m"},
    "pinCPU": True,
    "pinMemory": True,
    "allocatorTopologyBalancing": True,
    "reservedPoolNamespaces": ["kube-system"],
    "balloonTypes": [
        {"name": TYPE, "minCPUs": 2, "maxCPUs": 4, "dra": {"publish": True}},
        {"name": "dedicated-cpus", "allocatorPriority": "high", "preferNewBalloons": True},
    ],
    "instrumentation": {"httpEndpoint": ":8891"},
}
VALUES = ("hostNetwork=true", "image.pullPolicy=Never")


def our_devices(cluster: Cluster) -> list[dict[str, Any]]:
    found = cluster.try_get("resourceslices")
    slices = [
        s
        for s in (found["items"] if found else [])
        if (s["spec"]["driver"], s["spec"].get("nodeName")) == (DRIVER, NODE_NAME)
    ]
    return [d for s in slices for d in s["spec"]["devices"]]


def attribute(device: dict[str, Any], name: str) -> Any:
    (value,) = device["attributes"][name].values()
    return value


def daemon_cpus(cluster: Cluster) -> frozenset[int]:
    pods = cluster.get("pods", namespace=chart.NAMESPACE, selector=BALLOONS.selector)["items"]
    (pod,) = pods
    return parse_cpus(cluster.container_placement(pod).cpus)


def type_claim(numa_node: int, cpus: int) -> dict[str, Any]:
    """A balloon of type ``TYPE`` with ``cpus`` CPUs in NUMA node ``numa_node``."""
    attrs = f'device.attributes["{DRIVER}"]'
    expression = f'{attrs}.balloonType == "{TYPE}" && {attrs}.numaNode == {numa_node}'
    return {"devices": {"requests": [{"name": "cpus", "exactly": {
        "deviceClassName": DRIVER, "count": 1,
        "selectors": [{"cel": {"expression": expression}}],
        "capacity": {"requests": {"cpu": str(cpus)}}}}]}}  # fmt: skip


@pytest.fixture
def balloons_ready(cluster: Cluster) -> Cluster:
    if not chart.daemonset_ready(cluster, BALLOONS):
        pytest.fail("the balloons chart's DaemonSet is not Ready (see the test before)")
    return cluster


def test_the_balloons_chart_replaces_topology_aware_with_a_published_type(
    cluster: Cluster, tmp_path: Path
) -> None:
    if chart.daemonset_ready(cluster):
        pytest.fail("topology-aware's DaemonSet is still there (test_cluster_helm.py removes it)")
    hostnet = cluster.get("pod", "hostnet", namespace="default")
    before = parse_cpus(placement_of(cluster, hostnet, "hostnet").cpus)
    cluster.guest.write(VALUES_FILE, yaml.safe_dump({"config": CONFIG}))
    chart.install_chart(cluster, tmp_path, BALLOONS, VALUES, VALUES_FILE)
    started = time.monotonic()
    cluster.wait("the balloons DaemonSet's pod to be Ready",
                 lambda: chart.daemonset_ready(cluster, BALLOONS),
                 explain=lambda: chart.explain(cluster, BALLOONS))  # fmt: skip
    cluster.timings["balloons DaemonSet Ready"] = time.monotonic() - started
    (pod,) = cluster.get("pods", namespace=chart.NAMESPACE, selector=BALLOONS.selector)["items"]
    assert condition(pod, "Ready") == "True"
    probes = chart.probe_report(cluster, pod)
    assert probes["restartCount"] == 0, (probes, chart.explain(cluster, BALLOONS))
    # The chart saw the published type: the kubelet plugin's directory is mounted.
    mounts = {m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert f"/var/lib/kubelet/plugins/{DRIVER}" in mounts, sorted(mounts)
    cluster.get("deviceclass", DRIVER)
    # The running container, placed by topology-aware, is kept off the daemon's reserved CPUs.
    now = parse_cpus(placement_of(cluster, hostnet, "hostnet").cpus)
    assert not now & daemon_cpus(cluster), (sorted(now), sorted(daemon_cpus(cluster)))
    print(f"balloons installed: {probes}; hostnet cpus {sorted(before)} -> {sorted(now)}")


def test_the_published_type_offers_one_device_per_numa_node(balloons_ready: Cluster) -> None:
    cluster = balloons_ready
    started = time.monotonic()
    cluster.wait("the balloons driver's ResourceSlice", lambda: bool(our_devices(cluster)))
    cluster.timings["balloons ResourceSlice after Ready"] = time.monotonic() - started
    nodes = cluster.numa_nodes()
    reserved = daemon_cpus(cluster)
    devices = our_devices(cluster)
    for device in devices:
        node = attribute(device, "numaNode")
        assert device["name"] == f"{TYPE}-numa{node}"
        assert attribute(device, "balloonType") == TYPE
        assert device["allowMultipleAllocations"] is True
        offered = int(device["capacity"]["cpu"]["value"])
        # At most maxCPUs, and no more than the node's CPUs outside the reserved ones.
        assert 2 <= offered <= min(4, len(nodes[node] - reserved)), device
    assert {attribute(d, "numaNode") for d in devices} >= {
        n for n, cpus in nodes.items() if len(cpus - reserved) >= 2
    }
    print("balloons ResourceSlice: " + ", ".join(
        f"{d['name']} cpu={d['capacity']['cpu']['value']}" for d in devices))  # fmt: skip


def test_a_claim_for_a_balloon_of_the_type_runs_in_a_balloon_of_its_own(
    balloons_ready: Cluster,
) -> None:
    cluster = balloons_ready
    reserved = daemon_cpus(cluster)
    home = max(our_devices(cluster), key=lambda d: int(d["capacity"]["cpu"]["value"]))
    node = attribute(home, "numaNode")
    cluster.apply(claims.manifest("ResourceClaim", "fast-balloon", type_claim(node, 2)))
    pod = run_pod(cluster, "ballooned", hostnet_pod(
        "ballooned", [container("ballooned", "2", "64Mi", claims=("cpus",))],
        claims=[{"name": "cpus", "resourceClaimName": "fast-balloon"}]))  # fmt: skip
    claim = cluster.get("resourceclaim", "fast-balloon", namespace="default")
    uid = claim["metadata"]["uid"]
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"], result["device"]) == (DRIVER, NODE_NAME,
                                                                    home["name"])  # fmt: skip
    assert result["consumedCapacity"]["cpu"] == "2"
    name, spec = claims.cdi_spec(cluster, uid)
    kernel = placement_of(cluster, pod, "ballooned")
    env = environ(cluster, kernel)
    assert claims.claim_env(env, uid) == claims.claim_env(claims.spec_env(spec), uid) != {}
    cpus = parse_cpus(kernel.cpus)
    # The balloon: exactly the consumed CPUs, in the device's NUMA node, that node's memory.
    assert len(cpus) == 2 and cpus <= cluster.numa_nodes()[node], (kernel, node)
    assert kernel.mems == str(node) and kernel.cpus_allowed == kernel.cpus, kernel
    assert claims.the_claims_cpus_var(env, uid) == cpus
    hostnet = placement_of(cluster, cluster.get("pod", "hostnet", namespace="default"), "hostnet")
    for who, other in (("hostnet", parse_cpus(hostnet.cpus)), ("daemon", reserved)):
        assert not other & cpus, (who, sorted(other), sorted(cpus))
    print(f"claim fast-balloon {uid}: device {home['name']}, cgroup {kernel}; "
          f"CDI {name}: {claims.spec_env(spec)}; hostnet {hostnet}; "
          f"daemon cpus {sorted(reserved)}")  # fmt: skip
    delete_pod(cluster, "ballooned")
    cluster.wait("the claim released and its CDI spec removed",
                 lambda: claims.released(cluster, "fast-balloon", name))  # fmt: skip
    cluster.kubectl("delete", "resourceclaim", "fast-balloon", "--namespace=default")
