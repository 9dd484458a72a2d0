"""Replaying nri-plugins' balloons e2e scenarios: the chart's default config merged with the
test's values (as helm merges them: maps deeply, lists replaced), pods created in the
test's order, and each container's allowed CPUs read back as the runtime holds them."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from nri_resmgr.config.loader import structure_spec
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.balloons import BalloonsPolicy
from nri_resmgr.policies.balloons.types import BalloonsError
from nri_resmgr.resmgr.model import Container, Pod
from nri_resmgr.resmgr.policy import PolicyEnv
from nri_resmgr.sysfs import discover
from tests.policies.replay.helm import disjoint, helm_merge, milli
from tests.policies.replay.runtime import GuestHook
from tests.policies.replay.simulated import SimulatedRuntime
from tests.policies.workload import Runtime, container, pod
from tests.sysfs.fakesys import N4C16, Layout, write_sysfs

# The upstream chart's default ``config`` (deployment/helm/balloons/values.yaml), without
# the free-form RDT partitions, which no balloons scenario reads.
CHART_DEFAULTS: dict[str, Any] = {
    "reservedResources": {"cpu": "1000m"},
    "agent": {"nodeResourceTopology": True, "podResourceAPI": False},
    "allocatorTopologyBalancing": True,
    "balloonTypes": [
        {
            "name": "dedicated-cpus",
            "matchExpressions": [{"key": "qosclass", "operator": "In", "values": ["Guaranteed"]}],
            "preferNewBalloons": True,
            "preferSpreadingPods": True,
        },
        {
            "name": "shared-local-cpus",
            "matchExpressions": [
                {"key": "qosclass", "operator": "In", "values": ["BestEffort", "Burstable"]}
            ],
            "shareIdleCPUsInSame": "package",
            "preferNewBalloons": True,
            "maxBalloons": 2,
            "preferSpreadingPods": False,
        },
    ],
    "reservedPoolNamespaces": ["kube-system"],
    "control": {"rdt": {"enable": False, "usePodQoSAsDefaultClass": True}},
    "log": {"source": True, "klog": {"skip_headers": True}, "debug": ["none"]},
    "instrumentation": {
        "httpEndpoint": ":8891",
        "prometheusExport": False,
        "reportPeriod": "60s",
        "samplingRatePerMillion": 0,
    },
}


SIMULATED = False
"""Set by the simulated-runtime replay (conftest) for the duration of a test."""
OPEN: list[SimulatedRuntime] = []
GUEST: GuestHook | None = None
"""Set by the node suite (tests/node): pods go through CRI to a real containerd in a qemu
guest of the scenario's layout, placed there by our daemon, and are checked on what the
guest kernel holds."""
KIND = "BalloonsPolicy"
__all__ = ["CHART_DEFAULTS", "Scenario", "disjoint", "helm_merge", "milli"]


class Scenario:
    """One e2e test: ``create`` numbers pods pod0, pod1… as the e2e framework does."""

    def __init__(
        self,
        tmp_path: Path,
        config: Mapping[str, Any],
        layout: Layout = N4C16,
        write: bool = True,
    ) -> None:
        """``write=False``: the test wrote its own sysfs under ``tmp_path``. With
        ``SIMULATED`` set, pods go through the simulated runtime and the NRI stack."""
        values = helm_merge(CHART_DEFAULTS, config)
        spec = structure_spec(values, KIND)
        self.policy = BalloonsPolicy()
        self.runtime: Runtime | SimulatedRuntime | Any
        if write:
            write_sysfs(tmp_path, layout)
        self.system = discover(str(tmp_path))
        """The machine the scenario assumes (the policy's own view, in-process)."""
        if GUEST is not None:
            self.runtime = GUEST(KIND, values, layout, BalloonsError)
        elif SIMULATED:
            self.runtime = SimulatedRuntime(self.policy, spec, str(tmp_path), BalloonsError)
            OPEN.append(self.runtime)
        else:
            self.policy.setup(spec, PolicyEnv(host_root=str(tmp_path)))
            self.runtime = Runtime(self.policy)
        self.online = CpuSet(range(layout.cpu_count))
        self.next_pod = 0
        self.by_name: dict[str, Container] = {}
        self.pods: dict[str, tuple[Pod, list[Container]]] = {}

    def create(
        self,
        contcount: int = 1,
        namespace: str = "default",
        cpureq: str = "1",
        cpulim: str = "2",
        memreq: str = "100M",
        memlim: str = "200M",
        annotations: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> str:
        """Create the next pod; return its name. A container the policy refuses raises
        BalloonsError (the runtime fails its creation). The resource defaults are those of
        upstream's e2e framework for a variable a test never sets (run.sh
        ``yaml_in_defaults``); an empty ``cpureq`` means no resources (BestEffort)."""
        name = f"pod{self.next_pod}"
        self.next_pod += 1
        if not cpureq:
            qos = "besteffort"
        elif cpureq == cpulim and memreq == memlim and memreq:
            qos = "guaranteed"
        else:
            qos = "burstable"
        p = pod(name, qos, namespace, annotations)
        p = attrs.evolve(p, labels={"app": name, **(labels or {})})
        request = milli(cpureq) if cpureq else 0
        limit = milli(cpulim) if cpulim else None
        made: list[Container] = []
        self.pods[name] = (p, made)
        for i in range(contcount):
            c = container(p, f"{name}c{i}", request, limit)
            self.by_name[c.name] = c
            self.runtime.create((p, c))
            made.append(c)
        return name

    def control_plane(self) -> None:
        """The kubeadm control-plane pods the e2e VM runs in kube-system (kubeadm's default
        CPU requests: apiserver 250m, controller-manager 200m, scheduler 100m, etcd 100m,
        two coredns 100m): they are in the reserved balloon before any test pod."""
        for name, request in (("kube-apiserver", 250), ("kube-controller-manager", 200),
                            ("kube-scheduler", 100), ("etcd", 100), ("coredns-a", 100),
                            ("coredns-b", 100)):  # fmt: skip
            p = pod(name, "burstable", "kube-system")
            self.runtime.create((p, container(p, name, request, None)))

    def reconfigure(self, spec: Mapping[str, Any]) -> None:
        """A new configuration as a whole (a new CR, not merged with the chart's values)."""
        assert isinstance(self.runtime, Runtime), "reconfigure: in-process runtime only"
        self.runtime.apply(self.policy.reconfigure(structure_spec(spec, "BalloonsPolicy")))

    def balloon_of(self, name: str) -> str:
        a = self.policy.state.members.get(self.by_name[name].id)
        assert a is not None, name
        return a.pool

    def try_create(self, **kw: Any) -> BalloonsError | None:
        """``create`` expected to fail; like upstream's subshell, the pod number is reused."""
        number = self.next_pod
        try:
            self.create(**kw)
        except BalloonsError as e:
            self.pods.pop(f"pod{number}", None)
            self.next_pod = number
            return e
        return None

    def delete(self, *names: str) -> None:
        for name in names:
            p, made = self.pods.pop(name)
            for c in made:
                self.runtime.remove(c)
                del self.by_name[c.name]
            if isinstance(self.runtime, Runtime):
                self.policy.remove_pod_sandbox(p)

    def delete_all(self) -> None:
        self.delete(*list(self.pods))

    @property
    def cpus(self) -> dict[str, CpuSet]:
        """Each container's allowed CPUs (all online CPUs when the policy did not pin)."""
        out = {}
        for name, c in self.by_name.items():
            text = self.runtime.cpus[c.id]
            out[name] = CpuSet.parse(text) if text else self.online
        return out

    def mems(self, name: str) -> str | None:
        return self.runtime.mems[self.by_name[name].id]
