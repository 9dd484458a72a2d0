"""Pods and containers as kubelet would hand them to the runtime, for policy tests."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from nri_resmgr.config.models import BalloonsSpec, Constraints, PolicySpec, TopologyAwareSpec
from nri_resmgr.policies.requests import milli_cpu_to_shares
from nri_resmgr.resmgr.model import Container, ContainerState, Pod, Resources, Update
from nri_resmgr.resmgr.policy import Policy, PolicyEnv
from tests.sysfs.fakesys import Layout, write_sysfs

PERIOD = 100_000
_ids = itertools.count()


def resources(request: int, limit: int | None, memory: int | None = None) -> Resources:
    quota = None if limit is None else limit * PERIOD // 1000
    return Resources(
        cpu_shares=milli_cpu_to_shares(request),
        cpu_quota=quota,
        cpu_period=PERIOD if quota is not None else None,
        memory_limit=memory,
    )


def pod(
    name: str,
    qos: str,
    namespace: str = "default",
    annotations: Mapping[str, str] | None = None,
) -> Pod:
    uid = f"uid-{name}-{next(_ids)}"
    parent = {
        "guaranteed": f"kubepods-pod{uid}.slice",
        "burstable": f"kubepods-burstable-pod{uid}.slice",
        "besteffort": f"kubepods-besteffort-pod{uid}.slice",
    }[qos]
    return Pod(
        id=f"sandbox-{uid}",
        name=name,
        namespace=namespace,
        uid=uid,
        annotations=dict(annotations or {}),
        cgroup_parent=parent,
    )


def container(p: Pod, name: str, request: int = 0, limit: int | None = None) -> Container:
    return Container(
        id=f"{p.name}-{name}-{next(_ids)}",
        pod_id=p.id,
        name=name,
        state=ContainerState.RUNNING,
        resources=resources(request, limit),
    )


def guaranteed(
    name: str, milli: int, namespace: str = "default", annotations: Mapping[str, str] | None = None
) -> tuple[Pod, Container]:
    p = pod(name, "guaranteed", namespace, annotations)
    return p, container(p, "c0", milli, milli)


def burstable(
    name: str, request: int, limit: int | None = None, namespace: str = "default"
) -> tuple[Pod, Container]:
    p = pod(name, "burstable", namespace)
    return p, container(p, "c0", request, limit)


def besteffort(
    name: str, namespace: str = "default", annotations: Mapping[str, str] | None = None
) -> tuple[Pod, Container]:
    p = pod(name, "besteffort", namespace, annotations)
    return p, container(p, "c0")


def topology_spec(reserved: str = "750m", available: str | None = None, **kw: Any) -> PolicySpec:
    return TopologyAwareSpec(
        reserved_resources=Constraints.of(cpu=reserved or None),
        available_resources=Constraints.of(cpu=available),
        **kw,
    )


def balloons_spec(reserved: str = "1", available: str | None = None, **kw: Any) -> PolicySpec:
    return BalloonsSpec(
        reserved_resources=Constraints.of(cpu=reserved or None),
        available_resources=Constraints.of(cpu=available),
        **kw,
    )


def start(policy: Policy, root: Path, layout: Layout, spec: PolicySpec) -> Policy:
    write_sysfs(root, layout)
    policy.setup(spec, PolicyEnv(host_root=str(root)))
    return policy


def running(c: Container, cpus: str | None, mems: str | None) -> Container:
    """``c`` as the runtime reports it after it was pinned (what Synchronize hands over)."""
    res = c.resources or Resources()
    return attrs.evolve(c, resources=attrs.evolve(res, cpuset_cpus=cpus, cpuset_mems=mems))


class Runtime:
    """What the runtime would hold after applying adjustments and updates: cpus/mems per
    container. Lets tests check every container's effective placement, not just the reply."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.pods: dict[str, Pod] = {}
        self.containers: dict[str, Container] = {}
        self.cpus: dict[str, str | None] = {}
        self.mems: dict[str, str | None] = {}
        self.updated: list[str] = []

    def create(self, pc: tuple[Pod, Container]) -> Container:
        p, c = pc
        self.pods[p.id] = p
        adjustment, updates = self.policy.create_container(p, c)
        self.containers[c.id] = c
        # An empty string is not carried on the wire: the runtime sees "no change" (unpinned).
        self.cpus[c.id] = adjustment.cpuset_cpus or None
        self.mems[c.id] = adjustment.cpuset_mems or None
        self.apply(updates)
        return c

    def remove(self, c: Container) -> None:
        updates = self.policy.stop_container(self.pods[c.pod_id], c)
        updates += self.policy.remove_container(self.pods[c.pod_id], c)
        del self.containers[c.id], self.cpus[c.id], self.mems[c.id]
        self.apply(updates)

    def apply(self, updates: list[Update]) -> None:
        self.updated = []
        for u in updates:
            assert u.container_id in self.containers, f"update for unknown {u.container_id}"
            self.updated.append(u.container_id)
            # As on the wire: an empty cpuset is dropped, the container keeps what it had.
            if u.adjustment.cpuset_cpus:
                self.cpus[u.container_id] = u.adjustment.cpuset_cpus
            if u.adjustment.cpuset_mems:
                self.mems[u.container_id] = u.adjustment.cpuset_mems

    def placement(self, c: Container) -> tuple[str | None, str | None]:
        return self.cpus[c.id], self.mems[c.id]

    def reported(self) -> tuple[list[Pod], list[Container]]:
        """The pods and containers, with cpusets, as Synchronize would deliver them."""
        containers = [
            running(c, self.cpus[c.id], self.mems[c.id]) for c in self.containers.values()
        ]
        return list(self.pods.values()), containers
