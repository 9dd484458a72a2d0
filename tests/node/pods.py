"""Pods made by hand on the real node, from upstream's e2e pod templates (the replays'
``manifest``), created through CRI as kubelet creates them; and what the kernel shows for
them, by container name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.sim.kubelet import NriPod, nri_pod
from nri_resmgr.sim.workload import AddPod, parse_workload
from tests.node.cri import container_config, sandbox_config
from tests.node.guest import KernelPlacement
from tests.node.node import Node, RunningContainer
from tests.policies.topology_aware_e2e.scenario import manifest


def kube_pod(
    template: str,
    name: str,
    memory_capacity: int,
    *,
    namespace: str = "default",
    annotations: Mapping[str, str] | None = None,
    **var: Any,
) -> NriPod:
    """A pod from ``test/e2e/files/<template>.yaml.in`` with its variables, as kubelet and
    containerd hand it to NRI."""
    doc = manifest(template, name, namespace=namespace, annotations=annotations, **var)
    (step,) = parse_workload(yaml.safe_dump(doc), name).steps
    assert isinstance(step, AddPod)
    return nri_pod(step.pod, memory_capacity=memory_capacity)


class Pods:
    """The pods a test made on a node, and the kernel's view of their containers."""

    def __init__(self, node: Node, memory_capacity: int) -> None:
        self.node = node
        self.memory_capacity = memory_capacity
        self.sandboxes: dict[str, str] = {}
        self.running: dict[str, RunningContainer] = {}

    def create(self, template: str, name: str, **kw: Any) -> list[RunningContainer]:
        made = kube_pod(template, name, self.memory_capacity, **kw)
        config = sandbox_config(made.pod)
        pod_id = self.node.run_pod(config)
        self.sandboxes[name] = pod_id
        out = []
        for _, c in made.containers:
            running = self.node.start_container(pod_id, config, container_config(c))
            self.running[c.name] = running
            out.append(running)
        return out

    def delete(self, name: str) -> None:
        self.node.remove_pod(self.sandboxes.pop(name))
        for cname in [
            n for n, c in self.running.items() if c.pod_id not in self.sandboxes.values()
        ]:
            del self.running[cname]

    def kernel(self) -> dict[str, KernelPlacement]:
        """Container name -> what the guest kernel holds for its process."""
        found = self.node.guest.placements({n: c.pid for n, c in self.running.items()})
        for name, k in found.items():
            assert (k.cpus, k.mems) == (k.cpus_allowed, k.mems_allowed), f"{name}: {k}"
        return found

    def cpus(self) -> dict[str, CpuSet]:
        return {n: CpuSet.parse(k.cpus) for n, k in self.kernel().items()}


def shown(placements: Mapping[str, KernelPlacement]) -> dict[str, tuple[str, str]]:
    """Name -> (cpus, mems), for comparisons and messages."""
    return {n: (k.cpus, k.mems) for n, k in sorted(placements.items())}
