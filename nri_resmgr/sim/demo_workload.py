"""Placement demo: a mixed workload through a policy, on a synthetic or the real machine.

Backs ``nri-resmgr demo``: it shows what the policy would give each container, and which
containers it would re-pin along the way, without a runtime.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import attrs

from nri_resmgr.config.models import BalloonsSpec, BalloonType, Constraints, TopologyAwareSpec
from nri_resmgr.errors import ResmgrError
from nri_resmgr.policies import create_policy
from nri_resmgr.policies.requests import milli_cpu_to_shares
from nri_resmgr.resmgr.model import Container, ContainerState, Pod, Resources
from nri_resmgr.resmgr.policy import PolicyEnv
from nri_resmgr.sim.synthetic import TOPOLOGIES, write_sysfs
from nri_resmgr.sysfs import discover

# (namespace, pod, qos, request mCPU, limit mCPU or None)
WORKLOAD: tuple[tuple[str, str, str, int, int | None], ...] = (
    ("kube-system", "coredns", "burstable", 100, None),
    ("default", "db", "guaranteed", 2000, 2000),
    ("default", "web", "guaranteed", 1500, 1500),
    ("default", "cache", "guaranteed", 1000, 1000),
    ("default", "batch", "besteffort", 0, None),
    ("default", "api", "burstable", 500, 2000),
    ("default", "tiny", "guaranteed", 250, 250),
)


@attrs.frozen
class Row:
    container: str
    qos: str
    request: int
    cpus: str
    mems: str
    repinned: tuple[str, ...]


def demo_spec(policy_name: str) -> TopologyAwareSpec | BalloonsSpec:
    if policy_name == "balloons":
        return BalloonsSpec(
            reserved_resources=Constraints.of(cpu="750m"),
            balloon_types=(
                BalloonType(name="dedicated", namespaces=("default",), prefer_new_balloons=True),
            ),
        )
    if policy_name == "topology-aware":
        return TopologyAwareSpec(reserved_resources=Constraints.of(cpu="750m"))
    raise ValueError(f"no demo for policy {policy_name!r} (topology-aware, balloons)")


def run(policy_name: str, host_root: str) -> list[Row]:
    policy = create_policy(policy_name)
    policy.setup(demo_spec(policy_name), PolicyEnv(host_root=host_root))
    names: dict[str, str] = {}
    rows: list[Row] = []
    for namespace, name, qos, request, limit in WORKLOAD:
        pod, container = workload_objects(namespace, name, qos, request, limit)
        label = f"{namespace}/{name}"
        names[container.id] = label
        try:
            adjustment, updates = policy.create_container(pod, container)
        except ResmgrError as e:
            # A policy may refuse a container (balloons: no room): the runtime fails it.
            rows.append(Row(label, qos, request, "(failed)", "-", (str(e),)))
            continue
        rows.append(
            Row(
                label,
                qos,
                request,
                adjustment.cpuset_cpus if adjustment.cpuset_cpus is not None else "(unchanged)",
                adjustment.cpuset_mems if adjustment.cpuset_mems is not None else "(unchanged)",
                tuple(f"{names[u.container_id]}→{u.adjustment.cpuset_cpus}" for u in updates),
            )
        )
    return rows


def demo(policy_name: str = "topology-aware", machine: str = "n4c16") -> str:
    """The placement table for ``machine``: a synthetic layout name or ``host`` (this one)."""
    if machine == "host":
        return _render(policy_name, "this machine", "")
    if machine not in TOPOLOGIES:
        known = ", ".join(["host", *sorted(TOPOLOGIES)])
        raise ValueError(f"unknown machine {machine!r} (known: {known})")
    with tempfile.TemporaryDirectory(prefix="nri-resmgr-demo-") as tmp:
        root = write_sysfs(Path(tmp), TOPOLOGIES[machine])
        return _render(policy_name, f"synthetic {machine}", str(root))


def _render(policy_name: str, title: str, host_root: str) -> str:
    system = discover(host_root)
    nodes = ", ".join(f"node{n.id}={n.cpus}" for n in system.nodes.values())
    lines = [
        f"{policy_name} on {title}: {len(system.online)} CPUs ({system.online}), {nodes}",
        f"{'container':<22}{'qos':<12}{'mCPU':>6}  {'cpus':<14}{'mems':<8}re-pinned",
    ]
    for r in run(policy_name, host_root):
        repinned = ", ".join(r.repinned) or "-"
        lines.append(
            f"{r.container:<22}{r.qos:<12}{r.request:>6}  {r.cpus:<14}{r.mems:<8}{repinned}"
        )
    return "\n".join(lines)


def workload_objects(
    namespace: str, name: str, qos: str, request: int, limit: int | None
) -> tuple[Pod, Container]:
    parent = {"guaranteed": "", "burstable": "-burstable", "besteffort": "-besteffort"}[qos]
    pod = Pod(
        id=f"pod-{name}",
        name=name,
        namespace=namespace,
        uid=f"uid-{name}",
        cgroup_parent=f"kubepods{parent}-poduid_{name}.slice",
    )
    quota = None if limit is None else limit * 100
    resources = Resources(
        cpu_shares=milli_cpu_to_shares(request),
        cpu_quota=quota,
        cpu_period=100_000 if quota is not None else None,
    )
    container = Container(
        id=f"ctr-{name}",
        pod_id=pod.id,
        name="main",
        state=ContainerState.CREATED,
        resources=resources,
    )
    return pod, container
