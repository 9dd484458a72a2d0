"""Pods as kubelet and containerd present them to NRI: QoS, cgroup values, identity."""

from __future__ import annotations

import pytest

from nri_resmgr.policies.requests import QoS, container_request
from nri_resmgr.quantity import QuantityError, cpu_milli, memory_bytes
from nri_resmgr.sim.kubelet import nri_pod, qos_class
from nri_resmgr.sim.workload import AddPod, PodSpec, parse_workload

MI = 1 << 20


def one_pod(manifest: str) -> PodSpec:
    workload = parse_workload(manifest)
    assert not workload.problems, workload.problems
    (step,) = workload.steps
    assert isinstance(step, AddPod)
    return step.pod


def pod_with(resources: str, init: str = "") -> PodSpec:
    return one_pod(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n"
        + (f"  initContainers:\n  - name: i\n    resources: {init}\n" if init else "")
        + f"  containers:\n  - name: c\n    resources: {resources}\n"
    )


@pytest.mark.parametrize(
    ("text", "milli"),
    [("250m", 250), ("1", 1000), ("1.5", 1500), (2, 2000), ("0.1", 100), ("1e-1", 100),
     ("0.0001", 1), ("100u", 1)],
)  # fmt: skip
def test_cpu_quantities_round_up_to_millicpus(text: object, milli: int) -> None:
    assert cpu_milli(text) == milli


@pytest.mark.parametrize(
    ("text", "size"),
    [("128Mi", 128 * MI), ("1Gi", 1 << 30), ("1G", 10**9), ("1.5", 2), ("100k", 100_000),
     ("1e6", 10**6)],
)  # fmt: skip
def test_memory_quantities_are_bytes(text: str, size: int) -> None:
    assert memory_bytes(text) == size


@pytest.mark.parametrize("text", ["abc", "1.2.3", "-1", "5X", "", True])
def test_bad_quantities_are_refused(text: object) -> None:
    with pytest.raises(QuantityError):
        cpu_milli(text)


@pytest.mark.parametrize(
    ("resources", "init", "qos"),
    [
        ("{}", "", QoS.BESTEFFORT),
        ("{requests: {cpu: '0'}}", "", QoS.BESTEFFORT),  # zero quantities do not count
        ("{limits: {cpu: 1, memory: 1Gi}}", "", QoS.GUARANTEED),  # requests default to limits
        ("{requests: {cpu: 1, memory: 1Gi}, limits: {cpu: 1, memory: 1Gi}}", "", QoS.GUARANTEED),
        ("{limits: {cpu: 1}}", "", QoS.BURSTABLE),  # no memory limit
        ("{requests: {cpu: 500m}, limits: {cpu: 1, memory: 1Gi}}", "", QoS.BURSTABLE),
        ("{limits: {cpu: 1, memory: 1Gi}}", "{}", QoS.BURSTABLE),  # an init without limits
        ("{limits: {cpu: 1, memory: 1Gi}}", "{limits: {cpu: 2, memory: 1Gi}}", QoS.GUARANTEED),
        ("{requests: {memory: 10Mi}}", "", QoS.BURSTABLE),
    ],
)
def test_qos_class_follows_kubelet(resources: str, init: str, qos: QoS) -> None:
    assert qos_class(pod_with(resources, init).containers) is qos


def test_the_nri_view_of_a_guaranteed_cpu_is_what_containerd_reports() -> None:
    # real-runtime fact sheet: Guaranteed 1 CPU = shares 1024, quota 100000, period 100000.
    nri = nri_pod(pod_with("{limits: {cpu: 1, memory: 256Mi}}"))
    ((_, ctr),) = nri.containers
    assert ctr.resources is not None
    assert (ctr.resources.cpu_shares, ctr.resources.cpu_quota, ctr.resources.cpu_period) == (
        1024, 100_000, 100_000,
    )  # fmt: skip
    assert ctr.resources.memory_limit == 256 * MI
    assert nri.pod.cgroup_parent == f"/kubepods/pod{nri.pod.uid}"
    # ... and the policies read back exactly what the manifest asked for.
    request = container_request(nri.pod, ctr)
    assert (request.cpu_request, request.cpu_limit, request.qos) == (1000, 1000, QoS.GUARANTEED)


@pytest.mark.parametrize(
    ("resources", "shares", "quota", "qos"),
    [
        ("{}", 2, None, QoS.BESTEFFORT),
        ("{requests: {cpu: 250m}}", 256, None, QoS.BURSTABLE),
        ("{requests: {cpu: 1200m}, limits: {cpu: 2}}", 1228, 200_000, QoS.BURSTABLE),
        ("{limits: {cpu: 5m}}", 5, 1000, QoS.BURSTABLE),  # the 1 ms minimum quota
    ],
)
def test_requests_and_limits_become_shares_and_quota(
    resources: str, shares: int, quota: int | None, qos: QoS
) -> None:
    nri = nri_pod(pod_with(resources))
    ((_, ctr),) = nri.containers
    assert ctr.resources is not None
    assert (ctr.resources.cpu_shares, ctr.resources.cpu_quota) == (shares, quota)
    assert ctr.resources.cpu_period == 100_000  # kubelet always sets the CFS period
    request = container_request(nri.pod, ctr)
    assert request.qos is qos
    assert request.cpu_limit == (None if quota is None else max(quota // 100, 10))


def test_the_sandbox_carries_pod_resources_like_containerd_did_for_coredns() -> None:
    # A containerd sandbox spec seen in the wild: coredns, 100m request, 170Mi limit.
    pod = one_pod(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: coredns, namespace: kube-system,"
        " uid: 44e4b37f-504f-4f1c-80f3-4137bfbec5e4}\nspec:\n  containers:\n  - name: coredns\n"
        "    resources: {requests: {cpu: 100m, memory: 70Mi}, limits: {memory: 170Mi}}\n"
    )
    nri = nri_pod(pod)
    a = nri.pod.annotations
    assert a["io.kubernetes.cri.sandbox-cpu-shares"] == "102"
    assert a["io.kubernetes.cri.sandbox-cpu-quota"] == "0"
    assert a["io.kubernetes.cri.sandbox-cpu-period"] == "100000"
    assert a["io.kubernetes.cri.sandbox-memory"] == "178257920"
    assert a["io.kubernetes.cri.sandbox-log-directory"] == (
        "/var/log/pods/kube-system_coredns_44e4b37f-504f-4f1c-80f3-4137bfbec5e4"
    )
    assert nri.pod.cgroup_parent == "/kubepods/burstable/pod44e4b37f-504f-4f1c-80f3-4137bfbec5e4"
    assert nri.pod.namespace == "kube-system"
    assert nri.pod.labels["io.kubernetes.pod.uid"] == pod.uid


def test_pod_annotations_reach_the_sandbox_and_not_the_containers() -> None:
    pod = one_pod(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations:\n"
        "    prefer-shared-cpus.resource-policy.nri.io/container.c: 'true'\n"
        "spec:\n  containers:\n  - {name: c, image: busybox}\n"
    )
    nri = nri_pod(pod, driver="systemd")
    ((_, ctr),) = nri.containers
    key = "prefer-shared-cpus.resource-policy.nri.io/container.c"
    assert nri.pod.annotations[key] == "true"
    assert key not in ctr.annotations
    assert ctr.annotations["io.kubernetes.cri.container-name"] == "c"
    assert ctr.annotations["io.kubernetes.cri.sandbox-id"] == nri.pod.id == ctr.pod_id
    assert ctr.labels["io.kubernetes.container.name"] == "c"
    assert nri.pod.namespace == "default"
    assert nri.pod.cgroup_parent == f"kubepods-besteffort-pod{pod.uid.replace('-', '_')}.slice"
    assert len(ctr.id) == 64


def test_pod_requests_take_the_larger_of_init_and_app_containers() -> None:
    nri = nri_pod(pod_with("{requests: {cpu: 500m}}", init="{requests: {cpu: 2}}"))
    assert nri.pod.resources is not None
    assert nri.pod.resources.cpu_shares == 2048


@pytest.mark.parametrize(
    ("resources", "capacity", "adj"),
    [
        ("{requests: {cpu: 1, memory: 1Gi}, limits: {cpu: 1, memory: 1Gi}}", 8192 * MI, -997),
        ("{}", 8192 * MI, 1000),
        # Burstable: 1000 - 1000 x request / capacity (kubelet's qos.GetContainerOOMScoreAdjust)
        ("{requests: {memory: 1Gi}, limits: {memory: 2Gi}}", 8192 * MI, 875),
        ("{requests: {memory: 8Gi}}", 8192 * MI, 3),  # its floor
        ("{requests: {cpu: 1}}", 8192 * MI, 999),  # no memory request: its ceiling
        ("{requests: {memory: 1Gi}}", 0, None),  # the node's memory not given
    ],
)
def test_oom_score_adj_is_kubelets(resources: str, capacity: int, adj: int | None) -> None:
    nri = nri_pod(pod_with(resources), memory_capacity=capacity)
    ((_, ctr),) = nri.containers
    assert ctr.oom_score_adj == adj
