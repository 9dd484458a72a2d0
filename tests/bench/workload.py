"""The node workload every contender gets: pods of five containers, none asking for CPU.

The bench machine may have two CPUs, and the Go topology-aware policy refuses a container
once the shared pool's CPU requests are granted (it also counts the 2 shares kubelet gives
BestEffort containers as a 2m request). So containers carry no CPU fields, and every tenth
pod is Burstable through a small memory limit: 1,000 containers fit any policy, and no
contender is measured on its out-of-capacity error path.
"""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]
CONTAINERS_PER_POD = 5


def _burstable(pod_n: int) -> bool:
    return pod_n % 10 == 0


def pod(n: int) -> JSON:
    qos = "burstable" if _burstable(n) else "besteffort"
    return {
        "id": f"bench-pod-{n}",
        "name": f"bench-pod-{n}",
        "uid": f"00000000-0000-0000-0000-{n:012d}",
        "namespace": "default",
        "labels": {"app": f"bench-{n}"},
        "annotations": {},
        "linux": {"cgroup_parent": f"/kubepods/{qos}/pod{n}"},
    }


def container(pod_obj: JSON, n: int, *, running: bool = False, state: str = "") -> JSON:
    """Container ``n`` (node-wide unique) of ``pod_obj``; ``state`` overrides the default
    (``CONTAINER_RUNNING`` when ``running``, else ``CONTAINER_CREATED``)."""
    burstable = "burstable" in pod_obj["linux"]["cgroup_parent"]
    resources: JSON = {}
    if burstable:
        resources["memory"] = {"limit": {"value": str(4 << 20)}}
    return {
        "id": f"bench-ctr-{n}",
        "pod_sandbox_id": pod_obj["id"],
        "name": f"ctr-{n}",
        "state": state or ("CONTAINER_RUNNING" if running else "CONTAINER_CREATED"),
        "labels": {},
        "annotations": {},
        "linux": {
            "resources": resources,
            "cgroups_path": f"{pod_obj['linux']['cgroup_parent']}/bench-ctr-{n}",
        },
    }


def pod_of(container_n: int) -> JSON:
    return pod(container_n // CONTAINERS_PER_POD)


def existing_state(n_containers: int) -> tuple[list[JSON], list[JSON]]:
    """Pods and running containers for a runtime that already has ``n_containers``."""
    n_pods = -(-n_containers // CONTAINERS_PER_POD)
    pods = [pod(p) for p in range(n_pods)]
    ctrs = [container(pod_of(c), c, running=True) for c in range(n_containers)]
    return pods, ctrs
