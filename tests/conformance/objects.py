"""Pods and containers in the protobuf JSON form the harness takes (NRI api messages)."""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]


def pod(n: int, namespace: str = "default") -> JSON:
    return {
        "id": f"pod-{n}-sandbox",
        "name": f"pod-{n}",
        "uid": f"00000000-0000-0000-0000-{n:012d}",
        "namespace": namespace,
        "labels": {"app": f"app-{n}"},
        "annotations": {},
        "linux": {"cgroup_parent": f"/kubepods/burstable/pod{n}"},
    }


def container(
    pod_obj: JSON, n: int, *, state: str = "CONTAINER_UNKNOWN", milli_cpu: int = 500
) -> JSON:
    """A container of ``pod_obj`` requesting and limited to ``milli_cpu`` and 256 MiB."""
    return {
        "id": f"{pod_obj['name']}-ctr-{n}",
        "pod_sandbox_id": pod_obj["id"],
        "name": f"ctr-{n}",
        "state": state,
        "labels": {},
        "annotations": {},
        "linux": {
            "resources": {
                "cpu": {
                    "shares": {"value": str(milli_cpu * 1024 // 1000)},
                    "quota": {"value": str(milli_cpu * 100)},
                    "period": {"value": "100000"},
                },
                "memory": {"limit": {"value": str(256 << 20)}},
            },
            "cgroups_path": f"{pod_obj['linux']['cgroup_parent']}/ctr-{n}",
        },
    }
