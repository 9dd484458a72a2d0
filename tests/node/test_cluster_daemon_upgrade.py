"""``helm upgrade`` of the daemon to a new image tag while pods come and go (issue 32, item 4),
after ``test_cluster.py`` installed the chart with DRA on: the DaemonSet replaces its pod (the
old daemon stops on SIGTERM before the new one starts, so NRI and kubelet are without the
plugin for a while), and meanwhile pods are created and deleted. Read from the API server and
the guest kernel: no pod's container fails to be created or restarts, the claim prepared
before the upgrade keeps its CPUs and is unprepared by the new daemon, and a container
created meanwhile is placed (one exclusive CPU, off the claim's).

The new tag names the same image (``ctr images tag``): what is exercised is the rollout, not
a change of code. Not in the core set: ``nox -s node`` (NRI_RESMGR_NODE_ALL=1) runs it.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.node import chart
from tests.node.claims import cdi_spec, manifest, released
from tests.node.cluster import Cluster, parse_cpus
from tests.node.kubepods import container, delete_pod, hostnet_pod, placement_of, run_pod
from tests.runtime.image import IMAGE

pytestmark = pytest.mark.node_cluster

NEW_TAG = "upgraded"
NUMA = f"{chart.DRIVER}/numaNode"
ROUNDS_AFTER_ROLLOUT = 1


def claim_of_two_cpus() -> dict[str, Any]:
    return {"devices": {
        "requests": [{"name": "cpus", "exactly": {"deviceClassName": chart.DRIVER, "count": 2}}],
        "constraints": [{"requests": ["cpus"], "matchAttribute": NUMA}],
    }}  # fmt: skip


def daemon_pod(cluster: Cluster) -> dict[str, Any] | None:
    pods = cluster.try_get("pods", namespace=chart.NAMESPACE, selector=chart.SELECTOR)
    items = pods["items"] if pods else []
    return items[0] if len(items) == 1 else None


def rolled_out(cluster: Cluster, old_uid: str) -> bool:
    pod = daemon_pod(cluster)
    return bool(pod and pod["metadata"]["uid"] != old_uid and chart.daemonset_ready(cluster))


def cpus_of(cluster: Cluster, name: str, container_name: str = "") -> frozenset[int]:
    pod = cluster.get("pod", name, namespace="default")
    return parse_cpus(placement_of(cluster, pod, container_name or name).cpus)


def churn_pod(cluster: Cluster, name: str) -> None:
    """A Guaranteed pod of one exclusive CPU, run and then deleted."""
    run_pod(cluster, name, hostnet_pod(name, [container(name, "1", "32Mi")]))


def failures(cluster: Cluster, names: set[str]) -> list[str]:
    """Events of the pods that say a container could not be created or started."""
    events = cluster.get("events", namespace="default")["items"]
    bad = ("Failed", "BackOff", "FailedCreatePodSandBox")
    return [f"{e['involvedObject'].get('name')}: {e.get('reason')}: {e.get('message')}"
            for e in events
            if e["involvedObject"].get("name") in names and e.get("reason") in bad]  # fmt: skip


def test_helm_upgrade_to_a_new_image_tag_while_pods_come_and_go(cluster: Cluster) -> None:
    if not chart.daemonset_ready(cluster):
        pytest.fail("the chart's DaemonSet is not Ready (see test_cluster.py)")
    cluster.apply(manifest("ResourceClaim", "kept", claim_of_two_cpus()))
    run_pod(cluster, "keeper", hostnet_pod(
        "keeper", [container("keeper", "2", "32Mi", claims=("cpus",))],
        claims=[{"name": "cpus", "resourceClaimName": "kept"}]))  # fmt: skip
    claim = cluster.get("resourceclaim", "kept", namespace="default")
    spec_name, _ = cdi_spec(cluster, claim["metadata"]["uid"])
    kept = cpus_of(cluster, "keeper")
    results = claim["status"]["allocation"]["devices"]["results"]
    assert kept == {int(r["device"].removeprefix("cpu")) for r in results}, (kept, results)
    old = daemon_pod(cluster)
    assert old is not None
    name, _ = IMAGE.rsplit(":", 1)
    cluster.guest.run("/usr/local/bin/ctr", "-n", "k8s.io", "images", "tag", IMAGE,
                      f"{name}:{NEW_TAG}", timeout=300)  # fmt: skip
    started = time.monotonic()
    # No --wait: helm returns once the DaemonSet is changed, and the rollout runs meanwhile.
    cluster.helm("upgrade", chart.RELEASE, f"/opt/charts/{chart.CHART.name}", "--namespace",
                 chart.NAMESPACE, "--reuse-values", "--set", f"image.tag={NEW_TAG}")  # fmt: skip
    churned: list[str] = []
    after_rollout = 0
    while after_rollout <= ROUNDS_AFTER_ROLLOUT:
        if rolled_out(cluster, old["metadata"]["uid"]):
            after_rollout += 1
        elif time.monotonic() - started > 900:
            pytest.fail(f"the DaemonSet did not roll out in 900 s:\n{chart.explain(cluster)}")
        churn = f"churn-{len(churned)}"
        churn_pod(cluster, churn)
        churned.append(churn)
        if len(churned) > 1:  # the one before goes while this one runs
            delete_pod(cluster, churned[-2])
    cluster.timings["helm upgrade (new tag) to rolled out, under churn"] = (
        time.monotonic() - started
    )
    new = daemon_pod(cluster)
    assert new is not None
    assert new["spec"]["containers"][0]["image"].endswith(f":{NEW_TAG}")
    assert new["status"]["containerStatuses"][0]["restartCount"] == 0, chart.explain(cluster)
    assert failures(cluster, {*churned, "keeper", "hostnet"}) == []
    # The claim kept its CPUs through the daemon's absence.
    assert cpus_of(cluster, "keeper") == kept
    assert cluster.get("resourceclaim", "kept", namespace="default")["status"]["reservedFor"]
    # The last churn pod runs (created after the rollout or while the daemon was away, and
    # then placed by the new daemon): one exclusive CPU, off the claim's CPUs.
    cluster.wait(f"{churned[-1]} placed on one exclusive CPU",
                 lambda: len(cpus_of(cluster, churned[-1])) == 1, timeout=300)  # fmt: skip
    last = cpus_of(cluster, churned[-1])
    shared = cpus_of(cluster, "hostnet")  # the shared pool: neither the claim's nor exclusive
    assert not last & kept and not last & shared and not shared & kept, (last, kept, shared)
    print(f"upgrade under churn: {len(churned)} pods created, daemon pod "
          f"{old['metadata']['name']} -> {new['metadata']['name']}; keeper {sorted(kept)} kept, "
          f"hostnet on {sorted(shared)}, {churned[-1]} on {sorted(last)}")  # fmt: skip
    delete_pod(cluster, churned[-1])
    # The new daemon unprepares the claim the old one prepared.
    delete_pod(cluster, "keeper")
    cluster.wait("the kept claim released and its CDI spec removed by the new daemon",
                 lambda: released(cluster, "kept", spec_name))  # fmt: skip
    cluster.kubectl("delete", "resourceclaim", "kept", "--namespace=default")
