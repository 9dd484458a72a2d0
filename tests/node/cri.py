"""CRI requests as kubelet sends them, from the NRI view of a pod (``nri_resmgr.sim.kubelet``).

The simulator's ``nri_pod`` says what kubelet and containerd hand to an NRI plugin; this
module takes back out what containerd adds itself (``io.cri-containerd.kind`` labels,
``io.kubernetes.cri.*`` annotations), so that the real containerd in the guest adds them
again and the plugin sees what it would see under kubelet: the pod's cgroup parent, its
labels and annotations, each container's CPU shares, CFS quota and period, memory limit and
oom_score_adj. Pods share the node's network namespace (no CNI, no IP address).
"""

from __future__ import annotations

from typing import Any

from nri_resmgr.resmgr.model import Container, Pod, Resources
from tests.cri_api import NETWORK_NODE
from tests.runtime.ociimage import IMAGE_NAME

CONTAINERD_LABELS = ("io.cri-containerd.",)
CONTAINERD_ANNOTATIONS = ("io.kubernetes.cri.",)


def _strip(values: dict[str, str] | Any, prefixes: tuple[str, ...]) -> dict[str, str]:
    return {k: v for k, v in dict(values).items() if not k.startswith(prefixes)}


def _resources(r: Resources | None) -> dict[str, int]:
    if r is None:
        return {}
    out = {"cpu_period": r.cpu_period or 0, "cpu_shares": r.cpu_shares or 0}
    if r.cpu_quota:
        out["cpu_quota"] = r.cpu_quota
    if r.memory_limit:
        out["memory_limit_in_bytes"] = r.memory_limit
    return out


def sandbox_config(pod: Pod) -> dict[str, Any]:
    return {
        "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid, "attempt": 0},
        "labels": _strip(pod.labels, CONTAINERD_LABELS),
        "annotations": _strip(pod.annotations, CONTAINERD_ANNOTATIONS),
        "log_directory": f"/var/log/pods/{pod.namespace}_{pod.name}_{pod.uid}",
        "linux": {
            "cgroup_parent": pod.cgroup_parent,
            "resources": _resources(pod.resources),
            "security_context": {"namespace_options": {"network": NETWORK_NODE}},
        },
    }


def container_config(c: Container, command: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The container runs ``echo NAME; sleep`` as upstream's e2e pods do, unless told."""
    resources: dict[str, int] = _resources(c.resources)
    if c.oom_score_adj is not None:
        resources["oom_score_adj"] = c.oom_score_adj
    argv = command or ("/bin/sh", "-c", f"echo {c.name}; exec sleep 2147483647")
    return {
        "metadata": {"name": c.name, "attempt": 0},
        "image": {"image": IMAGE_NAME},
        "command": list(argv),
        "labels": _strip(c.labels, CONTAINERD_LABELS),
        "annotations": _strip(c.annotations, CONTAINERD_ANNOTATIONS),
        "log_path": f"{c.name}/0.log",
        "linux": {"resources": resources},
    }
