"""The cluster objects of the scheduler-to-cpuset chain, and the clean-up a bare apiserver needs.

A DeviceClass selecting our driver, a ResourceClaim created by name (templates need the
controller manager) asking for N CPUs on one NUMA node, and a Pod using it. Without a
kube-controller-manager nothing deallocates a claim when its pod goes, so ``release`` does
what the resourceclaim controller would: clears ``status``, drops the finalizer, deletes.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

import trio

from nri_resmgr.backoff import Backoff
from nri_resmgr.dra.kubeletplugin import SlicePublisher
from nri_resmgr.dra.kubeletplugin.publisher import DeviceSource
from nri_resmgr.kube import AlreadyExists, KubeClient, NotFound
from nri_resmgr.kube.resources import NAMESPACES, PODS, RESOURCE_CLAIMS, ApiResource
from tests.dra.scheduler import schedulable_node

DEVICE_CLASSES = ApiResource(
    "resource.k8s.io", "v1", "deviceclasses", namespaced=False, kind="DeviceClass"
)

JSON = dict[str, Any]

__all__ = [
    "DEVICE_CLASSES",
    "allocated",
    "bound",
    "claim",
    "device_class",
    "pod",
    "publisher",
    "release",
    "scaffold",
]


async def scaffold(
    client: KubeClient, namespace: str, node: str, driver: str, cpus: int = 16
) -> None:
    """What a test needs on the apiserver before its driver starts: its own namespace, a
    schedulable ``node`` and ``driver``'s DeviceClass (both kept where an earlier test of
    the same apiserver made them)."""
    await client.create(NAMESPACES, {"metadata": {"name": namespace}})
    with contextlib.suppress(AlreadyExists):
        await schedulable_node(client, node, cpus=cpus)
    with contextlib.suppress(AlreadyExists):
        await client.create(DEVICE_CLASSES, device_class(driver))


def publisher(client: KubeClient, devices: DeviceSource, driver: str, node: str) -> SlicePublisher:
    """The daemon's ResourceSlice publisher, retrying within a second (a test's pace)."""
    return SlicePublisher(client, devices, driver, node, backoff=Backoff(initial=0.1, maximum=1))


def device_class(driver: str) -> JSON:
    """The DeviceClass the Helm chart ships: every device of ``driver``."""
    expression = f'device.driver == "{driver}"'
    return {
        "metadata": {"name": driver},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def claim(name: str, driver: str, count: int, same: str) -> JSON:
    """``count`` devices of the class, all with the same value of attribute ``same``
    (a qualified name, ``<domain>/<id>``)."""
    return {
        "metadata": {"name": name},
        "spec": {"devices": {
            "requests": [{"name": "cpus", "exactly": {
                "deviceClassName": driver, "allocationMode": "ExactCount", "count": count}}],
            "constraints": [{"requests": ["cpus"], "matchAttribute": same}],
        }},
    }  # fmt: skip


def pod(name: str, claim_name: str, cpus: int) -> JSON:
    """A Guaranteed pod whose one container uses the claim; its native CPU request mirrors the
    claim (kubelet and NodeResourcesFit do not count DRA CPUs, fact sheet pitfall 18)."""
    resources = {"cpu": str(cpus), "memory": "100Mi"}
    return {
        "metadata": {"name": name, "uid": str(uuid.uuid4())},
        "spec": {
            "containers": [{"name": "app", "image": "pause",
                            "resources": {"requests": resources, "limits": resources,
                                          "claims": [{"name": "cpus"}]}}],
            "resourceClaims": [{"name": "cpus", "resourceClaimName": claim_name}],
        },
    }  # fmt: skip


async def allocated(client: KubeClient, ns: str, name: str, limit: float = 30.0) -> JSON:
    """The claim once the scheduler has written its allocation."""
    with trio.fail_after(limit):
        while True:
            got = await client.get(RESOURCE_CLAIMS, name, ns)
            if (got.get("status") or {}).get("allocation"):
                return got
            await trio.sleep(0.02)


async def bound(client: KubeClient, ns: str, name: str, limit: float = 30.0) -> JSON:
    """The pod once the scheduler has bound it to a node (after the claim's allocation and
    reservation, in its binding cycle)."""
    with trio.fail_after(limit):
        while not (pod := await client.get(PODS, name, ns))["spec"].get("nodeName"):
            await trio.sleep(0.01)
    return pod


async def release(client: KubeClient, ns: str, pod_name: str, claim_name: str) -> None:
    """Deletes the pod at once (no kubelet confirms a graceful delete), then deallocates and
    deletes the claim, as kube-controller-manager would."""
    options = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
    with contextlib.suppress(NotFound):
        await client.request("DELETE", PODS.object_path(pod_name, ns), body=options)
    # Merge patches carry no resourceVersion: no conflict with the scheduler's late writes.
    with contextlib.suppress(NotFound):
        cleared = {"status": {"allocation": None, "reservedFor": None}}
        await client.patch(RESOURCE_CLAIMS, claim_name, cleared, ns, subresource="status")
        unlocked = {"metadata": {"finalizers": None}}
        await client.patch(RESOURCE_CLAIMS, claim_name, unlocked, ns)
        await client.delete(RESOURCE_CLAIMS, claim_name, ns)
