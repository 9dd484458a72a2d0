"""The workload file: every unusable document is named, down to the field; the rest runs."""

from __future__ import annotations

import pytest

from nri_resmgr.sim.workload import (
    AddPod,
    ChangeConfig,
    RemovePods,
    Role,
    WorkloadError,
    parse_workload,
)

POD = "apiVersion: v1\nkind: Pod\nmetadata: {name: %s}\nspec:\n  containers:\n  - name: c\n"


def test_a_kubectl_list_is_read_item_by_item() -> None:
    text = (
        "apiVersion: v1\nkind: List\nitems:\n"
        "- apiVersion: v1\n  kind: Pod\n  metadata: {name: a, namespace: ns1, uid: u-1}\n"
        "  spec: {containers: [{name: c}]}\n  status: {qosClass: BestEffort}\n"
        "- apiVersion: v1\n  kind: Pod\n  metadata: {name: b}\n  spec: {containers: [{name: c}]}\n"
    )
    workload = parse_workload(text)
    assert not workload.problems
    pods = [s.pod for s in workload.steps if isinstance(s, AddPod)]
    assert (pods[0].key, pods[0].uid) == ("ns1/a", "u-1")
    assert pods[1].key == "default/b"
    assert pods[0].reported_qos == "BestEffort"


def test_steps_keep_their_order() -> None:
    text = (
        POD % "a"
        + "---\napiVersion: simulate.nri-resmgr/v1\nkind: Remove\npods: [a, other/b]\n"
        + "---\napiVersion: config.nri/v1alpha1\nkind: TopologyAwarePolicy\n"
        + "metadata: {name: x}\nspec: {reservedResources: {cpu: 1}}\n"
        + "---\n"
        + POD % "b"
    )
    workload = parse_workload(text)
    kinds = [type(s) for s in workload.steps]
    assert kinds == [AddPod, RemovePods, ChangeConfig, AddPod]
    remove = workload.steps[1]
    assert isinstance(remove, RemovePods)
    assert remove.pods == ("default/a", "other/b")


@pytest.mark.parametrize(
    ("document", "where", "message"),
    [
        ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n", "document 1",
         "Deployment (apps/v1) is not a v1 Pod"),
        ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n"
         "    resources: {limits: {cpu: lots}}\n", "(pod default/p)",
         "spec.containers[0].resources.limits.cpu: 'lots' is not a quantity"),
        ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n"
         "    resources: {requests: {memory: 2Gi}, limits: {memory: 1Gi}}\n", "(pod default/p)",
         "spec.containers[0].resources.requests.memory: must be less than or equal to memory"),
        ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n"
         "  - name: c\n", "(pod default/p)", "spec.containers[1].name: duplicate container"),
        ("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations: {a: true}\n"
         "spec: {containers: [{name: c}]}\n", "(pod default/p)",
         "metadata.annotations.a: expected a string, got bool True (quote it)"),
        ("apiVersion: v1\nkind: Pod\nmetadata: {namespace: x}\nspec: {containers: [{name: c}]}\n",
         "(pod x/?)", "metadata.name: expected a non-empty string"),
        ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {initContainers: [{name: i}]}\n",
         "(pod default/p)", "spec.containers: a pod needs at least one container"),
        ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  resources: {limits: {cpu: 1}}\n"
         "  containers: [{name: c}]\n", "(pod default/p)", "spec.resources: pod-level resources"),
        ("apiVersion: config.nri/v1alpha1\nkind: TopologyAwarePolicy\nmetadata: {name: x}\n"
         "spec: {reservedResources: {cpu: 1}, pinCPU: yes}\n", "(TopologyAwarePolicy)",
         "spec.pinCPU: expected a boolean"),
        ("apiVersion: simulate.nri-resmgr/v1\nkind: Remove\npods: web\n", "document 1",
         "pods: expected a list of pod names"),
    ],
)  # fmt: skip
def test_a_bad_document_is_named_and_the_next_one_still_counts(
    document: str, where: str, message: str
) -> None:
    workload = parse_workload(document + "---\n" + POD % "good", "w.yaml")
    (problem,) = workload.problems
    assert where in problem.where and problem.where.startswith("w.yaml: document 1 (line ")
    assert message in problem.message
    (step,) = workload.steps
    assert isinstance(step, AddPod) and step.pod.name == "good"


def test_a_second_pod_of_the_same_name_is_refused() -> None:
    workload = parse_workload(POD % "a" + "---\n" + POD % "a")
    assert len(workload.steps) == 1
    assert "already exists" in str(workload.problems[0])


def test_init_containers_come_first_and_sidecars_are_recognised() -> None:
    text = (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n"
        "  containers: [{name: app}]\n"
        "  initContainers: [{name: once}, {name: side, restartPolicy: Always}]\n"
    )
    (step,) = parse_workload(text).steps
    assert isinstance(step, AddPod)
    roles = [(c.name, c.role) for c in step.pod.containers]
    assert roles == [("once", Role.INIT), ("side", Role.SIDECAR), ("app", Role.APP)]
    assert step.pod.containers[0].path == "spec.initContainers[0]"


def test_hugepages_are_noted_as_not_simulated() -> None:
    text = POD % "p" + "    resources: {limits: {hugepages-2Mi: 2Mi, cpu: 1, memory: 1Gi}}\n"
    workload = parse_workload(text)
    assert not workload.problems
    assert "hugepages-2Mi: not carried by the simulation" in str(workload.notes[0])


def test_broken_yaml_stops_with_the_line() -> None:
    with pytest.raises(WorkloadError, match="line 2"):
        parse_workload("apiVersion: v1\nkind: Pod: x\n")


def test_finished_pods_from_kubectl_are_noted_not_created() -> None:
    text = POD % "done" + "status: {phase: Succeeded}\n---\n" + POD % "live"
    workload = parse_workload(text)
    assert [s.pod.name for s in workload.steps if isinstance(s, AddPod)] == ["live"]
    assert "status.phase Succeeded: not created" in str(workload.notes[0])
