"""The oracle: the same workload handed straight to a policy instance, no runtime, no NRI.

It keeps the cpusets the policy's own answers imply (adjustments at creation, updates for
the others at every event) in the order a runtime sends the events. ``simulate`` must end
up where this does: otherwise the simulated runtime, the NRI path or the conversion lost
or changed a decision on the way.
"""

from __future__ import annotations

import contextlib

import attrs

from nri_resmgr.config import PolicyDocument
from nri_resmgr.errors import ConfigError
from nri_resmgr.policies import create_policy
from nri_resmgr.resmgr.model import Adjustment, Container, ContainerState, Pod, Resources, Update
from nri_resmgr.resmgr.policy import Policy, PolicyEnv
from nri_resmgr.sim.kubelet import nri_pod
from nri_resmgr.sim.workload import AddPod, ChangeConfig, RemovePods, Role, Workload
from nri_resmgr.sysfs import discover


@attrs.define
class Reference:
    policy: Policy
    cpus: dict[str, tuple[str, str]] = attrs.Factory(dict)
    """Container label → (cpus, mems) the runtime would hold."""
    ids: dict[str, str] = attrs.Factory(dict)
    pods: dict[str, tuple[Pod, list[Container]]] = attrs.Factory(dict)
    running: set[str] = attrs.Factory(set)
    memory: int = 0
    """The machine's memory: kubelet's capacity for a Burstable oom_score_adj."""

    def apply(self, label: str, adj: Adjustment) -> None:
        cpus, mems = self.cpus.get(label, ("", ""))
        self.cpus[label] = (
            adj.cpuset_cpus if adj.cpuset_cpus is not None else cpus,
            adj.cpuset_mems if adj.cpuset_mems is not None else mems,
        )

    def updates(self, updates: list[Update]) -> None:
        by_id = {v: k for k, v in self.ids.items()}
        for u in updates:
            if u.container_id in by_id and by_id[u.container_id] in self.running:
                self.apply(by_id[u.container_id], u.adjustment)


def run_reference(root: str, doc: PolicyDocument, workload: Workload) -> Reference:
    policy = create_policy(doc.policy_name)
    policy.setup(doc.spec, PolicyEnv(host_root=root))
    ref = Reference(policy, memory=sum(n.memory for n in discover(root).nodes.values()))
    for step in workload.steps:
        if isinstance(step, AddPod):
            _add(ref, step)
        elif isinstance(step, RemovePods):
            for key in step.pods:
                pod, containers = ref.pods.pop(key)
                for c in reversed(containers):
                    label = f"{key}/{c.name}"
                    if label in ref.running:
                        ref.updates(policy.stop_container(pod, _now(ref, label, c)))
                        ref.running.discard(label)
                    ref.updates(policy.remove_container(pod, c))
                policy.remove_pod_sandbox(pod)
        elif isinstance(step, ChangeConfig):
            with contextlib.suppress(ConfigError):  # refused: the old configuration stays
                ref.updates(policy.reconfigure(step.doc.spec))
    return ref


def _add(ref: Reference, step: AddPod) -> None:
    nri = nri_pod(step.pod, memory_capacity=ref.memory)
    ref.policy.run_pod_sandbox(nri.pod)
    created = []
    for spec, ctr in nri.containers:
        label = f"{step.pod.key}/{spec.name}"
        ref.ids[label] = ctr.id
        adjustment, updates = ref.policy.create_container(nri.pod, ctr)
        ref.running.add(label)
        ref.apply(label, adjustment)
        ref.updates(updates)
        running = attrs.evolve(_now(ref, label, ctr), state=ContainerState.RUNNING)
        ref.policy.start_container(nri.pod, running)
        created.append(running)
        if spec.role is Role.INIT:
            ref.updates(ref.policy.stop_container(nri.pod, running))
            ref.running.discard(label)
    ref.pods[step.pod.key] = (nri.pod, created)


def _now(ref: Reference, label: str, c: Container) -> Container:
    """The container as the runtime holds it now (the policy may read its cpuset)."""
    cpus, mems = ref.cpus.get(label, ("", ""))
    res = attrs.evolve(
        c.resources or Resources(), cpuset_cpus=cpus or None, cpuset_mems=mems or None
    )
    return attrs.evolve(c, resources=res)
