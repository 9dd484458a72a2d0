"""A Pod manifest as kubelet and containerd present it to an NRI plugin.

What each value is, and who makes it:

- QoS class: kubelet's rule over init and app containers, counting only cpu and memory and
  ignoring zero quantities: nothing requested or limited is BestEffort; every container
  limiting both, with the pod's summed requests equal to its summed limits, is Guaranteed;
  anything else is Burstable.
- Pod cgroup parent (the policies read the QoS class from it): cgroupfs driver
  ``/kubepods[/burstable|/besteffort]/pod<uid>``, systemd driver
  ``kubepods[-burstable|-besteffort]-pod<uid with _>.slice``.
- Container resources: kubelet's CRI values as containerd writes them into the OCI spec,
  which is what NRI reads back: cpu.shares = request x 1024 / 1000 (2 when none; the limit
  when only a limit exists), CFS period 100000 always, quota = limit x 100 (at least 1000;
  absent when unlimited), memory limit when set; oom_score_adj by kubelet's QoS rule
  (Guaranteed -997, BestEffort 1000, Burstable from the memory request and the node's memory
  ``memory_capacity``; left unset when that is not given).
- Pod resources: the CRI sandbox config's values for the whole pod (max of the app
  containers' sum and each init container), all fields present, 0 when unlimited.
- Labels and annotations: the pod's own, plus what kubelet and containerd add
  (``io.kubernetes.pod.*``, ``io.kubernetes.container.*``, ``io.kubernetes.cri.*``,
  ``kubernetes.io/config.*``). The pod's annotations are on the sandbox only; containers
  carry kubelet's and containerd's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import attrs

from nri_resmgr.policies.oomscore import (
    BESTEFFORT_OOM_SCORE_ADJ,
    GUARANTEED_OOM_SCORE_ADJ,
    burstable_oom_score_adj,
)
from nri_resmgr.policies.requests import QoS, milli_cpu_to_shares
from nri_resmgr.resmgr.model import Container, ContainerState, Pod, Resources
from nri_resmgr.sim.workload import Amounts, ContainerSpec, PodSpec, Role

__all__ = ["CFS_PERIOD", "CGROUP_DRIVERS", "NriPod", "container_resources", "nri_pod", "qos_class"]

CFS_PERIOD = 100_000
MIN_QUOTA = 1_000
CGROUP_DRIVERS = ("cgroupfs", "systemd")
# A fixed "first seen" time keeps runs (and their JSON) reproducible.
CONFIG_SEEN = "2026-01-01T00:00:00.000000000Z"


@attrs.frozen
class NriPod:
    pod: Pod
    containers: tuple[tuple[ContainerSpec, Container], ...]
    qos: QoS


def qos_class(containers: Sequence[ContainerSpec]) -> QoS:
    requests: dict[str, int] = {}
    limits: dict[str, int] = {}
    guaranteed = True
    for c in containers:
        for field in ("cpu", "memory"):
            request, limit = getattr(c.requests, field), getattr(c.limits, field)
            if request:
                requests[field] = requests.get(field, 0) + request
            if limit:
                limits[field] = limits.get(field, 0) + limit
        if not (c.limits.cpu and c.limits.memory):
            guaranteed = False
    if not requests and not limits:
        return QoS.BESTEFFORT
    if guaranteed and requests == limits:
        return QoS.GUARANTEED
    return QoS.BURSTABLE


def container_resources(requests: Amounts, limits: Amounts) -> Resources:
    """kubelet's container cgroup values, as they reach NRI through the OCI spec."""
    cpu_request, cpu_limit = requests.cpu or 0, limits.cpu or 0
    shares = milli_cpu_to_shares(cpu_limit if cpu_request == 0 and cpu_limit else cpu_request)
    quota = max(cpu_limit * CFS_PERIOD // 1000, MIN_QUOTA) if cpu_limit else None
    return Resources(
        cpu_shares=shares,
        cpu_quota=quota,
        cpu_period=CFS_PERIOD,
        memory_limit=limits.memory or None,
    )


def pod_amounts(containers: Sequence[ContainerSpec], pick: str) -> Amounts:
    """The pod's requests or limits: the larger of the long-running containers' sum and each
    init container (plus the sidecars started before it), as kubelet's resource helper."""

    def total(field: str) -> int | None:
        running = 0
        peak = 0
        seen = False
        for c in containers:
            value = getattr(getattr(c, pick), field)
            seen = seen or value is not None
            if c.role is Role.INIT:
                peak = max(peak, running + (value or 0))
            else:
                running += value or 0
        return max(running, peak) if seen else None

    return Amounts(cpu=total("cpu"), memory=total("memory"))


def cgroup_parent(qos: QoS, uid: str, driver: str) -> str:
    tier = {QoS.GUARANTEED: "", QoS.BURSTABLE: "burstable", QoS.BESTEFFORT: "besteffort"}[qos]
    if driver == "systemd":
        middle = f"-{tier}" if tier else ""
        return f"kubepods{middle}-pod{uid.replace('-', '_')}.slice"
    middle = f"/{tier}" if tier else ""
    return f"/kubepods{middle}/pod{uid}"


def nri_pod(spec: PodSpec, driver: str = "cgroupfs", memory_capacity: int = 0) -> NriPod:
    qos = qos_class(spec.containers)
    sandbox_id = _hex_id("sandbox", spec.uid)
    requests = pod_amounts(spec.containers, "requests")
    limits = pod_amounts(spec.containers, "limits")
    cpu_limit = limits.cpu or 0
    pod_resources = Resources(
        cpu_shares=milli_cpu_to_shares(
            cpu_limit if not requests.cpu and cpu_limit else requests.cpu or 0
        ),
        cpu_quota=max(cpu_limit * CFS_PERIOD // 1000, MIN_QUOTA) if cpu_limit else 0,
        cpu_period=CFS_PERIOD,
        memory_limit=limits.memory or 0,
    )
    pod_labels = {
        **spec.labels,
        "io.kubernetes.pod.name": spec.name,
        "io.kubernetes.pod.namespace": spec.namespace,
        "io.kubernetes.pod.uid": spec.uid,
        "io.cri-containerd.kind": "sandbox",
    }
    pod_annotations = {
        **spec.annotations,
        "kubernetes.io/config.seen": CONFIG_SEEN,
        "kubernetes.io/config.source": "api",
        "io.kubernetes.cri.container-type": "sandbox",
        "io.kubernetes.cri.sandbox-id": sandbox_id,
        "io.kubernetes.cri.sandbox-name": spec.name,
        "io.kubernetes.cri.sandbox-namespace": spec.namespace,
        "io.kubernetes.cri.sandbox-uid": spec.uid,
        "io.kubernetes.cri.sandbox-log-directory": (
            f"/var/log/pods/{spec.namespace}_{spec.name}_{spec.uid}"
        ),
        "io.kubernetes.cri.sandbox-cpu-period": str(pod_resources.cpu_period),
        "io.kubernetes.cri.sandbox-cpu-quota": str(pod_resources.cpu_quota),
        "io.kubernetes.cri.sandbox-cpu-shares": str(pod_resources.cpu_shares),
        "io.kubernetes.cri.sandbox-memory": str(pod_resources.memory_limit),
    }
    pod = Pod(
        id=sandbox_id,
        name=spec.name,
        namespace=spec.namespace,
        uid=spec.uid,
        labels=pod_labels,
        annotations=pod_annotations,
        cgroup_parent=cgroup_parent(qos, spec.uid, driver),
        resources=pod_resources,
    )
    containers = tuple(
        (c, _container(spec, pod, c, _oom_score_adj(qos, c, memory_capacity)))
        for c in spec.containers
    )
    return NriPod(pod, containers, qos)


def _oom_score_adj(qos: QoS, c: ContainerSpec, capacity: int) -> int | None:
    if qos is QoS.GUARANTEED:
        return GUARANTEED_OOM_SCORE_ADJ
    if qos is QoS.BESTEFFORT:
        return BESTEFFORT_OOM_SCORE_ADJ
    return burstable_oom_score_adj(c.requests.memory or 0, capacity) if capacity else None


def _container(spec: PodSpec, pod: Pod, c: ContainerSpec, oom_score_adj: int | None) -> Container:
    labels = {
        "io.kubernetes.container.name": c.name,
        "io.kubernetes.pod.name": spec.name,
        "io.kubernetes.pod.namespace": spec.namespace,
        "io.kubernetes.pod.uid": spec.uid,
        "io.cri-containerd.kind": "container",
    }
    annotations = {
        "io.kubernetes.container.hash": _hex_id("hash", spec.uid, c.name)[:8],
        "io.kubernetes.container.restartCount": "0",
        "io.kubernetes.container.terminationMessagePath": "/dev/termination-log",
        "io.kubernetes.container.terminationMessagePolicy": "File",
        "io.kubernetes.pod.terminationGracePeriod": str(spec.termination_grace),
        "io.kubernetes.cri.container-type": "container",
        "io.kubernetes.cri.container-name": c.name,
        "io.kubernetes.cri.sandbox-id": pod.id,
        "io.kubernetes.cri.sandbox-name": spec.name,
        "io.kubernetes.cri.sandbox-namespace": spec.namespace,
        "io.kubernetes.cri.sandbox-uid": spec.uid,
        "io.kubernetes.cri.image-name": c.image,
    }
    return Container(
        id=_hex_id("container", spec.uid, c.name),
        pod_id=pod.id,
        name=c.name,
        state=ContainerState.CREATED,
        labels=labels,
        annotations=annotations,
        resources=container_resources(c.requests, c.limits),
        oom_score_adj=oom_score_adj,
    )


def _hex_id(*parts: str) -> str:
    """A 64-hex-digit id like containerd's, stable for the same pod and container."""
    return hashlib.sha256("/".join(parts).encode()).hexdigest()
