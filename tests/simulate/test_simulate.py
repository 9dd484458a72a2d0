"""simulate against the oracle: the policy's own decisions, with no runtime in between."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
import trio

from nri_resmgr import policies
from nri_resmgr.config.models import PolicySpec
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.errors import ConfigError
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from nri_resmgr.resmgr.model import Adjustment, Container, Pod, Update
from nri_resmgr.resmgr.policy import PolicyEnv
from nri_resmgr.sim.machine import open_machine
from nri_resmgr.sim.records import Status
from nri_resmgr.sim.report import render_table
from nri_resmgr.sim.runner import simulate
from nri_resmgr.sim.workload import parse_workload
from tests.cpulist import cpu_list
from tests.simulate.helpers import (
    TOPOLOGY_AWARE,
    WORKLOAD,
    cli_json,
    config,
    expected_placements,
    final_placements,
    run_both,
    run_cli,
)

MACHINES = ["n4c16", "four-numa-dies", "n4c16-isolated", "n4c128"]


@pytest.mark.parametrize("policy", ["topology-aware", "balloons"])
@pytest.mark.parametrize("machine", MACHINES)
async def test_every_container_ends_where_the_policy_itself_puts_it(
    policy: str, machine: str, tmp_path: Path
) -> None:
    result, reference = await run_both(machine, config(policy), WORKLOAD.read_text(), tmp_path)
    assert result.clean, render_table(result)
    assert final_placements(result) == expected_placements(reference)
    # The removed pod and the init container are accounted for, not silently dropped.
    status = {c.label: c.status for c in result.containers}
    assert status["default/pod0/c0"] == status["default/pod0/c1"] == Status.REMOVED
    assert status["default/pod1/setup"] == Status.EXITED
    assert status["default/pod1/proxy"] == Status.RUNNING


# n4c16-isolated: topology-aware's allocator reserves CPU 8 there (socket 1 has fewer free
# CPUs), not CPU 0, so the report must ask the policy's rule rather than take the lowest id.
@pytest.mark.parametrize("machine", ["n4c16", "n4c16-isolated"])
def test_the_cli_json_and_table_match_the_policy(tmp_path: Path, machine: str) -> None:
    args = ["--config", str(TOPOLOGY_AWARE), "--workload", str(WORKLOAD), "--machine", machine]
    data = cli_json(*args)
    table = run_cli("simulate", *args, expect=0).stdout
    _, reference = trio.run(
        run_both, machine, config("topology-aware"), WORKLOAD.read_text(), tmp_path
    )
    expected = expected_placements(reference)
    running = {
        f"{c['pod']}/{c['container']}": (c["final"]["cpus"], c["final"]["mems"])
        for c in data["containers"]
        if c["status"] == "running"
    }
    assert running == expected
    assert data["clean"] is True
    assert data["machine"]["cpus"] == "0-15"
    # The reserved CPUs marked in the output are the ones the policy gives kube-system.
    coredns = expected["kube-system/coredns/coredns"]
    assert coredns[0] == data["machine"]["reserved"]
    # Every CPU's users are the running containers whose final cpuset holds it.
    for label, (cpus, _) in expected.items():
        for cpu in CpuSet.parse(cpus):
            assert label in data["cpu_users"][str(cpu)]
    # The table shows the same "cpus now" and "mems now" for every running container.
    lines = table.splitlines()
    header = lines.index(next(line for line in lines if line.startswith("step")))
    rows = [re.split(r"\s{2,}", line) for line in lines[header + 1 :] if line.strip()]
    shown = {r[1].split(" (")[0]: (r[6], r[7]) for r in rows if len(r) == 10 and r[9] == "running"}
    assert shown == {k: (c or "(all)", m or "(all)") for k, (c, m) in expected.items()}


CONFIG_CHANGE = """
---
apiVersion: config.nri/v1alpha1
kind: TopologyAwarePolicy
metadata: {name: default}
spec:
  reservedResources: {cpu: "cpuset:0-3"}
"""


async def test_a_config_change_moves_containers_as_the_policy_says(tmp_path: Path) -> None:
    text = WORKLOAD.read_text() + CONFIG_CHANGE
    result, reference = await run_both("n4c16", config("topology-aware"), text, tmp_path)
    assert result.clean, render_table(result)
    assert final_placements(result) == expected_placements(reference)
    config_step = result.steps[-1]
    assert (config_step.action, config_step.ok) == ("config", True)
    coredns = next(c for c in result.containers if c.container == "coredns")
    assert coredns.final is not None
    assert coredns.final.step == config_step.number
    assert coredns.final.cpus == "0-3"
    assert str(result.reserved) == "0-3"  # what the output marks is the config in force


async def test_a_refused_config_change_keeps_the_old_one_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    bad = CONFIG_CHANGE.replace(
        'reservedResources: {cpu: "cpuset:0-3"}',
        ('reservedResources: {cpu: 750m}\n  availableResources: {cpu: "2"}'),
    )
    later = "---\napiVersion: v1\nkind: Pod\nmetadata: {name: late}\n"
    later += "spec:\n  containers:\n  - name: c\n"
    text = WORKLOAD.read_text() + bad + later
    result, _ = await run_both("n4c16", config("topology-aware"), text, tmp_path)
    step = next(s for s in result.steps if s.action == "config")
    assert not step.ok
    assert any(
        "spec.availableResources.cpu" in m and "old configuration kept" in m for m in step.messages
    )
    late = next(c for c in result.containers if c.pod == "default/late")
    assert late.status == Status.RUNNING
    assert not result.clean


TOO_BIG = """
---
apiVersion: v1
kind: Pod
metadata: {name: giant}
spec:
  containers:
  - name: g
    resources: {limits: {cpu: "64", memory: 1Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: after}
spec:
  containers:
  - name: a
    resources: {limits: {cpu: "1", memory: 1Gi}}
"""


def test_a_pod_the_node_cannot_hold_is_rejected_and_the_run_goes_on(tmp_path: Path) -> None:
    workload = tmp_path / "w.yaml"
    workload.write_text(WORKLOAD.read_text() + TOO_BIG)
    data = cli_json(
        "--config", str(TOPOLOGY_AWARE), "--workload", str(workload), "--machine", "n4c16", expect=1
    )
    by_label = {f"{c['pod']}/{c['container']}": c for c in data["containers"]}
    giant = by_label["default/giant/g"]
    assert giant["status"] == "failed"
    assert "requests.cpu" in giant["error"] and "OutOfcpu" in giant["error"]
    assert "requested 64000m" in giant["error"]
    assert by_label["default/after/a"]["status"] == "running"
    assert data["clean"] is False


class _Refusing(TopologyAwarePolicy):
    """A policy that fails the containers named ``doomed*``, as a policy error would."""

    def create_container(self, pod: Pod, container: Container) -> tuple[Adjustment, list[Update]]:
        if container.name.startswith("doomed"):
            raise RuntimeError(f"no room for {container.name}")
        return super().create_container(pod, container)


REFUSED = """
apiVersion: v1
kind: Pod
metadata: {name: mixed}
spec:
  containers:
  - name: doomed
    resources: {limits: {cpu: "1", memory: 1Gi}}
  - name: fine
    resources: {limits: {cpu: "1", memory: 1Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: blocked}
spec:
  initContainers:
  - name: doomed-init
  containers:
  - name: app
---
apiVersion: v1
kind: Pod
metadata: {name: next}
spec:
  containers:
  - name: c
    resources: {limits: {cpu: "2", memory: 1Gi}}
"""


async def test_a_container_the_policy_refuses_fails_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(policies.POLICIES, "topology-aware", _Refusing)
    with open_machine("n4c16") as machine:
        result = await simulate(
            machine, config("topology-aware"), parse_workload(REFUSED), tmp_path
        )
    by = {c.label: c for c in result.containers}
    doomed = by["default/mixed/doomed"]
    assert doomed.status == Status.FAILED
    assert doomed.error is not None and "no room for doomed" in doomed.error
    assert by["default/mixed/fine"].status == Status.RUNNING
    assert by["default/blocked/doomed-init"].status == Status.FAILED
    assert by["default/blocked/app"].status == Status.NOT_CREATED
    assert by["default/blocked/app"].error == "init container doomed-init failed"
    assert by["default/next/c"].status == Status.RUNNING
    # The exclusive CPUs of the failed container were never taken: "fine" and "next" get
    # their own, disjoint from each other.
    fine, nxt = by["default/mixed/fine"].final, by["default/next/c"].final
    assert fine is not None and nxt is not None
    assert not cpu_list(fine.cpus) & cpu_list(nxt.cpus), (fine.cpus, nxt.cpus)
    assert "default/mixed/doomed: CreateContainer failed" in render_table(result)


def test_the_overlap_check_sees_cpus_inside_ranges() -> None:
    # The check above once compared the list items as strings: "4-7" and "5" looked disjoint.
    fine, nxt = "4-7", "5"
    assert not set(fine.split(",")) & set(nxt.split(","))
    assert cpu_list(fine) & cpu_list(nxt) == {5}


def test_an_initial_config_the_policy_refuses_exits_2_naming_the_key(tmp_path: Path) -> None:
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(TOPOLOGY_AWARE.read_text().replace("cpu: 750m", "cpu: cpuset:99"))
    proc = run_cli("simulate", "--config", str(cfg), "--workload", str(WORKLOAD),
                   "--machine", "n4c16", expect=2)  # fmt: skip
    assert "configuration error: spec.reservedResources.cpu" in proc.stderr


def test_an_unknown_machine_is_named_with_the_known_ones() -> None:
    proc = run_cli("simulate", "--config", str(TOPOLOGY_AWARE), "--workload", str(WORKLOAD),
                   "--machine", "mars", expect=2)  # fmt: skip
    assert "'mars'" in proc.stderr and "n4c16" in proc.stderr


def test_a_helm_values_file_needs_the_policy_named() -> None:
    from tests.simulate.helpers import BALLOONS_VALUES

    with pytest.raises(ConfigError, match="add --policy"):
        from nri_resmgr.sim.command import load_config

        load_config(str(BALLOONS_VALUES))


class _Noting(TopologyAwarePolicy):
    """A policy that says, at load, that something is accepted but not applied."""

    def setup(self, spec: PolicySpec, env: PolicyEnv) -> None:
        super().setup(spec, env)
        logging.getLogger("nri_resmgr.policies").warning("spec.x: accepted, not applied")


async def test_what_the_policy_says_at_load_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(policies.POLICIES, "topology-aware", _Noting)
    with open_machine("n4c16") as machine:
        result = await simulate(
            machine, config("topology-aware"), parse_workload(WORKLOAD.read_text()), tmp_path
        )
    assert result.startup == ("warning: spec.x: accepted, not applied",)
    assert "at start:\n  warning: spec.x: accepted, not applied" in render_table(result)
    assert all("accepted" not in m for s in result.steps for m in s.messages)


class _RefusingPods(TopologyAwarePolicy):
    def run_pod_sandbox(self, pod: Pod) -> None:
        if pod.name == "pod1":
            raise RuntimeError("sandbox refused")
        super().run_pod_sandbox(pod)


async def test_a_pod_whose_sandbox_fails_is_reported_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(policies.POLICIES, "topology-aware", _RefusingPods)
    with open_machine("n4c16") as machine:
        result = await simulate(
            machine, config("topology-aware"), parse_workload(WORKLOAD.read_text()), tmp_path
        )
    pod1 = [c for c in result.containers if c.pod == "default/pod1"]
    assert pod1 and all(c.status == Status.FAILED for c in pod1)
    assert all(c.error == "RunPodSandbox failed: sandbox refused" for c in pod1)
    step = next(s for s in result.steps if s.target == "default/pod1")
    assert not step.ok
    assert next(c for c in result.containers if c.pod == "default/pod4").status == Status.RUNNING


KUBECTL_LIST = """
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Pod
  metadata:
    name: api-7d9c
    namespace: shop
    uid: 0b5a6c2e-1111-4c3d-9e8f-123456789abc
    ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: api-7d9c}]
  spec:
    nodeName: node-7
    containers:
    - name: api
      image: shop/api:1.2
      resources:
        limits: {cpu: "2", memory: 1Gi}
        requests: {cpu: "2", memory: 1Gi}
  status: {phase: Running, qosClass: Guaranteed}
- apiVersion: v1
  kind: Pod
  metadata: {name: odd, namespace: shop, uid: 0b5a6c2e-2222-4c3d-9e8f-123456789abc}
  spec:
    containers: [{name: c, resources: {}}]
  status: {phase: Running, qosClass: Burstable}
"""


async def test_kubectl_output_is_simulated_and_a_qos_mismatch_is_said(tmp_path: Path) -> None:
    result, reference = await run_both("n4c16", config("topology-aware"), KUBECTL_LIST, tmp_path)
    assert final_placements(result) == expected_placements(reference)
    api = next(c for c in result.containers if c.container == "api")
    assert (api.qos, api.status) == ("guaranteed", Status.RUNNING)
    assert api.final is not None and len(CpuSet.parse(api.final.cpus)) == 2
    odd = next(s for s in result.steps if s.target == "shop/odd")
    assert any("status.qosClass says Burstable" in m and "besteffort" in m for m in odd.messages)
