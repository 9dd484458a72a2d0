"""Pods for the guest's cluster (``cluster.py``), applied with kubectl and read back from the
API server and the guest kernel: hostNetwork pods of the test image (the guest has no pod
network, docs/development.md "The real node"), with or without DRA claims.

    run_pod(cluster, "p", hostnet_pod("p", containers=[container("p", "2", "64Mi")]))
"""

from __future__ import annotations

import json
import time
from typing import Any

from tests.node.cluster import Cluster
from tests.node.guest import CGROUP, KernelPlacement
from tests.runtime.ociimage import IMAGE_NAME


def container(name: str, cpu: str, memory: str, claims: tuple[str, ...] = ()) -> dict[str, Any]:
    """A Guaranteed container that sleeps; ``claims`` names pod resource claims it uses."""
    resources: dict[str, Any] = {"requests": {"cpu": cpu, "memory": memory},
                                 "limits": {"cpu": cpu, "memory": memory}}  # fmt: skip
    if claims:
        resources["claims"] = [{"name": claim} for claim in claims]
    return {"name": name, "image": IMAGE_NAME, "imagePullPolicy": "Never",
            "command": ["/bin/sleep", "3600"], "resources": resources}  # fmt: skip


def hostnet_pod(
    name: str,
    containers: list[dict[str, Any]],
    claims: list[dict[str, str]] | None = None,
) -> str:
    """A hostNetwork pod in ``default`` as JSON (kubectl applies JSON as YAML);
    ``claims`` is its ``spec.resourceClaims``."""
    spec: dict[str, Any] = {
        "hostNetwork": True,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 1,
        "containers": containers,
    }
    if claims:
        spec["resourceClaims"] = claims
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "default"}, "spec": spec}  # fmt: skip
    return json.dumps(pod)


# kubelet retries a failed NodePrepareResources for ever; this many failures is no longer
# a start-up race (the plugin registering) but the driver's answer.
PREPARE_FAILURES = 3


def run_pod(cluster: Cluster, name: str, manifest: str) -> dict[str, Any]:
    """``manifest`` applied and waited for until every container of pod ``name`` runs; an
    AssertionError with kubelet's event once its claims' preparation keeps failing."""
    cluster.apply(manifest)
    started = time.monotonic()

    def ready() -> bool:
        failed = prepare_failure(cluster, name)
        assert failed is None, f"kubelet could not prepare pod {name}'s claims: {failed}"
        return running(cluster, name)

    cluster.wait(f"pod {name} to run", ready,
                 explain=lambda: cluster.describe("pod", name))  # fmt: skip
    cluster.timings[f"pod {name} to running"] = time.monotonic() - started
    return cluster.get("pod", name, namespace="default")


def running(cluster: Cluster, name: str) -> bool:
    pod = cluster.try_get("pod", name, namespace="default")
    if pod is None:
        return False
    statuses = pod["status"].get("containerStatuses", [])
    want = len(pod["spec"]["containers"])
    return len(statuses) == want and all("running" in s["state"] for s in statuses)


def prepare_failure(cluster: Cluster, name: str) -> str | None:
    """kubelet's ``FailedPrepareDynamicResources`` message for the pod, once it repeated
    ``PREPARE_FAILURES`` times."""
    events = cluster.try_get("events", namespace="default")
    for event in events["items"] if events else []:
        if (event["involvedObject"].get("name") == name
                and event.get("reason") == "FailedPrepareDynamicResources"
                and int(event.get("count") or 1) >= PREPARE_FAILURES):  # fmt: skip
            return str(event.get("message"))
    return None


def delete_pod(cluster: Cluster, name: str) -> None:
    """The pod deleted and gone from the API server (kubelet stopped its containers)."""
    cluster.kubectl("delete", "pod", name, "--namespace=default", "--wait=false")
    started = time.monotonic()
    cluster.wait(f"pod {name} to be gone", lambda: gone(cluster, name))
    cluster.timings[f"pod {name} deleted to gone"] = time.monotonic() - started


def gone(cluster: Cluster, name: str) -> bool:
    pods = cluster.try_get("pods", namespace="default")
    return pods is not None and name not in {p["metadata"]["name"] for p in pods["items"]}


def placement_of(cluster: Cluster, pod: dict[str, Any], container_name: str) -> KernelPlacement:
    """The kernel's placement of the named container of ``pod``."""
    statuses = pod["status"]["containerStatuses"]
    (index,) = [i for i, s in enumerate(statuses) if s["name"] == container_name]
    return cluster.container_placement(pod, index)


def environ(cluster: Cluster, placement: KernelPlacement) -> dict[str, str]:
    """The environment of the container's first process, as the guest's /proc holds it."""
    pids = cluster.guest.read(f"{CGROUP}{placement.cgroup}/cgroup.procs").split()
    raw = cluster.guest.read(f"/proc/{pids[0]}/environ")
    return dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)
