"""DRA on the guest's cluster, after ``test_cluster.py`` installed the chart with DRA on: the
daemon's kubelet plugin registered with the real kubelet, its ResourceSlice, and claims from
kube-scheduler's allocation to the container's cgroup. Each link is read where it lives: the
slice and the claim from the API server, the CDI spec from the guest's /var/run/cdi (where
containerd reads it), the environment from the container's /proc/<pid>/environ, and the
placement from the container's cgroup in the guest kernel; never from the daemon's word.

Not in the core set: ``nox -s node`` (NRI_RESMGR_NODE_ALL=1) runs it, on the cluster of
``test_cluster.py`` (the session's ``cluster`` fixture).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.node import chart
from tests.node.claims import (
    CDI_DIR,
    cdi_spec,
    claim_env,
    manifest,
    released,
    spec_env,
    the_claims_cpus_var,
)
from tests.node.cluster import NODE_NAME, Cluster, parse_cpus
from tests.node.guest import KernelPlacement
from tests.node.kubepods import container, delete_pod, environ, hostnet_pod, placement_of, run_pod

pytestmark = pytest.mark.node_cluster

NUMA = f"{chart.DRIVER}/numaNode"


def claim_spec(count: int) -> dict[str, Any]:
    """``count`` CPUs of one NUMA node (docs/dra.md's example)."""
    return {"devices": {
        "requests": [{"name": "cpus",
                      "exactly": {"deviceClassName": chart.DRIVER, "count": count}}],
        "constraints": [{"requests": ["cpus"], "matchAttribute": NUMA}],
    }}  # fmt: skip


@pytest.fixture
def dra_ready(cluster: Cluster) -> Cluster:
    if not chart.daemonset_ready(cluster):
        pytest.fail("the chart's DaemonSet is not Ready (see test_cluster.py)")
    return cluster


def our_slices(cluster: Cluster) -> list[dict[str, Any]]:
    found = cluster.try_get("resourceslices")
    items = found["items"] if found else []
    mine = (chart.DRIVER, NODE_NAME)
    return [s for s in items if (s["spec"]["driver"], s["spec"].get("nodeName")) == mine]


def device_numa(device: dict[str, Any]) -> int:
    attrs = device["attributes"]
    value = attrs.get("numaNode") or attrs[NUMA]
    return int(value["int"])


def daemon_placement(cluster: Cluster) -> KernelPlacement:
    (pod,) = cluster.get("pods", namespace=chart.NAMESPACE, selector=chart.SELECTOR)["items"]
    return cluster.container_placement(pod)


def allocated_cpus(claim: dict[str, Any]) -> frozenset[int]:
    results = claim["status"]["allocation"]["devices"]["results"]
    assert {(r["driver"], r["pool"]) for r in results} == {(chart.DRIVER, NODE_NAME)}, results
    return frozenset(int(r["device"].removeprefix("cpu")) for r in results)


def check_pinned(
    cluster: Cluster, claim: dict[str, Any], kernel: KernelPlacement, env: dict[str, str]
) -> int:
    """The container holds exactly the claim's CPUs, of one NUMA node, and that node's
    memory, and its environment names those CPUs; the node."""
    cpus = allocated_cpus(claim)
    nodes = cluster.numa_nodes()
    (home,) = [n for n, node_cpus in nodes.items() if cpus <= node_cpus]
    assert parse_cpus(kernel.cpus) == cpus, (kernel, cpus)
    assert kernel.mems == str(home), (kernel, home)
    assert kernel.cpus_allowed == kernel.cpus, kernel
    assert the_claims_cpus_var(env, claim["metadata"]["uid"]) == cpus
    return home


def test_the_plugin_publishes_the_nodes_cpus_as_a_resource_slice(dra_ready: Cluster) -> None:
    cluster = dra_ready
    cluster.get("deviceclass", chart.DRIVER)  # the chart's DeviceClass
    started = time.monotonic()
    cluster.wait("the driver's ResourceSlice", lambda: bool(our_slices(cluster)))
    cluster.timings["ResourceSlice after Ready"] = time.monotonic() - started
    devices = [d for s in our_slices(cluster) for d in s["spec"]["devices"]]
    nodes = cluster.numa_nodes()
    for device in devices:  # each CPU device in the NUMA node the guest kernel says
        cpu = int(device["name"].removeprefix("cpu"))
        assert cpu in nodes[device_numa(device)], device
    cpus = {int(d["name"].removeprefix("cpu")) for d in devices}
    daemon = daemon_placement(cluster)  # kube-system: the reserved CPUs, never devices
    assert cpus and not cpus & parse_cpus(daemon.cpus), (sorted(cpus), daemon)
    print(f"ResourceSlice: {len(devices)} devices "
          + ", ".join(f"{d['name']}@node{device_numa(d)}" for d in devices))  # fmt: skip


def test_a_claim_for_four_cpus_of_one_numa_node_from_scheduler_to_cgroup(
    dra_ready: Cluster,
) -> None:
    cluster = dra_ready
    shared = cluster.get("pod", "hostnet", namespace="default")
    before = parse_cpus(placement_of(cluster, shared, "hostnet").cpus)
    cluster.apply(manifest("ResourceClaim", "four-cpus", claim_spec(4)))
    pod = run_pod(cluster, "claimed", hostnet_pod(
        "claimed", [container("claimed", "4", "64Mi", claims=("cpus",))],
        claims=[{"name": "cpus", "resourceClaimName": "four-cpus"}]))  # fmt: skip
    claim = cluster.get("resourceclaim", "four-cpus", namespace="default")
    uid = claim["metadata"]["uid"]
    # kube-scheduler allocated it on this node and reserved it for the pod.
    assert [r["uid"] for r in claim["status"]["reservedFor"]] == [pod["metadata"]["uid"]]
    cpus = allocated_cpus(claim)
    assert len(cpus) == 4
    # The daemon's CDI spec (written at kubelet's NodePrepareResources), as containerd read
    # it: the container's environment has its variables, with the claim's CPUs.
    name, spec = cdi_spec(cluster, uid)
    kernel = placement_of(cluster, pod, "claimed")
    env = environ(cluster, kernel)
    assert claim_env(env, uid) == claim_env(spec_env(spec), uid) != {}
    home = check_pinned(cluster, claim, kernel, env)
    # Every other container is off the claimed CPUs.
    others = {"hostnet": placement_of(cluster, cluster.get("pod", "hostnet", namespace="default"),
                                      "hostnet"), "daemon": daemon_placement(cluster)}  # fmt: skip
    for who, placed in others.items():
        assert not parse_cpus(placed.cpus) & cpus, (who, placed, sorted(cpus))
    print(
        f"claim four-cpus {uid}: devices {sorted(cpus)} (NUMA node {home}); "
        f"CDI {CDI_DIR}/{name}: {json.dumps(spec)}; container env "
        f"{claim_env(env, uid)}; cgroup {kernel}; others {others}"
    )
    # Deleted: kubelet unprepares (the daemon removes the spec), the claim is released, and
    # the shared container that had the CPUs before the claim has them again.
    delete_pod(cluster, "claimed")
    cluster.wait("the claim to be released and its CDI spec removed",
                 lambda: released(cluster, "four-cpus", name))  # fmt: skip
    returned = before & cpus
    cluster.wait(f"CPUs {sorted(returned)} back in the shared container",
                 lambda: returned <= shared_cpus(cluster), timeout=300)  # fmt: skip
    after = cluster.get("resourceclaim", "four-cpus", namespace="default")
    print(
        f"after the pod: claim status {after.get('status', {})}; hostnet cpus before "
        f"{sorted(before)}, now {sorted(shared_cpus(cluster))}"
    )
    cluster.kubectl("delete", "resourceclaim", "four-cpus", "--namespace=default")


def shared_cpus(cluster: Cluster) -> frozenset[int]:
    pod = cluster.get("pod", "hostnet", namespace="default")
    return parse_cpus(placement_of(cluster, pod, "hostnet").cpus)


def test_a_template_claim_shared_by_two_containers_of_a_pod(dra_ready: Cluster) -> None:
    cluster = dra_ready
    cluster.apply(manifest("ResourceClaimTemplate", "two-cpus", {"spec": claim_spec(2)}))
    pod = run_pod(cluster, "pair", hostnet_pod(
        "pair", [container(n, "1", "32Mi", claims=("cpus",)) for n in ("first", "second")],
        claims=[{"name": "cpus", "resourceClaimTemplateName": "two-cpus"}]))  # fmt: skip
    (made,) = pod["status"]["resourceClaimStatuses"]
    claim = cluster.get("resourceclaim", made["resourceClaimName"], namespace="default")
    assert claim["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
    cpus = allocated_cpus(claim)
    assert len(cpus) == 2
    for name in ("first", "second"):
        kernel = placement_of(cluster, pod, name)
        home = check_pinned(cluster, claim, kernel, environ(cluster, kernel))
        print(
            f"pair/{name}: claim {made['resourceClaimName']} {sorted(cpus)} node {home}; {kernel}"
        )
    delete_pod(cluster, "pair")
    # The generated claim goes with its pod (the resourceclaim controller deletes it).
    cluster.wait("the template's claim to be deleted",
                 lambda: gone_claim(cluster, made["resourceClaimName"]))  # fmt: skip


def gone_claim(cluster: Cluster, name: str) -> bool:
    claims = cluster.try_get("resourceclaims", namespace="default")
    return claims is not None and name not in {c["metadata"]["name"] for c in claims["items"]}
