"""Replaying nri-plugins' topology-aware e2e scenarios
(``test/e2e/policies.test-suite/topology-aware/``): the VM's topology, the chart's
default config with the suite's ``helm-config.yaml.in`` instantiated from the test's
variables, pods built from the e2e pod templates (``test/e2e/files/*.yaml.in``) with the
test's CPU/MEM/annotation variables and created in the test's order, each as kubelet and
containerd hand it to NRI (``nri_resmgr.sim.kubelet``), and the test's ``verify``
expressions evaluated on the CPUs and memory nodes the runtime holds.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from nri_resmgr.config.loader import structure_spec
from nri_resmgr.config.models import PolicySpec
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from nri_resmgr.resmgr.model import Container, Pod, Update
from nri_resmgr.resmgr.policy import PolicyEnv
from nri_resmgr.sim.kubelet import nri_pod
from nri_resmgr.sim.workload import AddPod, Role, parse_workload
from nri_resmgr.sysfs import System, discover
from tests.policies.replay.helm import helm_merge
from tests.policies.replay.runtime import GuestHook
from tests.policies.replay.simulated import SimulatedRuntime
from tests.policies.replay.verify import Names, check, namespace
from tests.policies.replay.vm import VmTopology, write_vm_sysfs
from tests.policies.workload import Runtime

# deployment/helm/topology-aware/values.yaml ``config`` (the RDT partitions left out: no
# topology-aware scenario reads them and rdt is disabled there).
CHART_DEFAULTS: dict[str, Any] = {
    "reservedResources": {"cpu": "750m"},
    "agent": {"nodeResourceTopology": True, "podResourceAPI": False},
    "control": {"rdt": {"enable": False, "usePodQoSAsDefaultClass": True}},
    "log": {"source": True, "klog": {"skip_headers": True}, "debug": ["none"]},
    "instrumentation": {
        "httpEndpoint": ":8891",
        "prometheusExport": False,
        "reportPeriod": "60s",
        "samplingRatePerMillion": 0,
    },
}

# test/e2e/run.sh ``yaml_in_defaults``: what a template variable is when a test leaves it.
TEMPLATE_DEFAULTS = {"CPU": "1", "MEM": "100M", "CPUREQ": "1", "CPULIM": "2",
                     "MEMREQ": "100M", "MEMLIM": "200M", "CONTCOUNT": 1}  # fmt: skip

POD_C = re.compile(r"pod[0-9]+c[0-9]+$")
SIMULATED = False
"""Set by the simulated-runtime replay for the duration of a test."""
OPEN: list[SimulatedRuntime] = []
GUEST: GuestHook | None = None
"""Set by the node suite (tests/node): pods go through CRI to a real containerd in a qemu
guest of the scenario's topology, placed there by our daemon, and are checked on what the
guest kernel holds. The guest keeps upstream's control-plane pods for the whole run."""


class Refused(Exception):
    """The runtime failed a container's creation: the policy refused it."""


def helm_config(
    *,
    RESERVED_CPU: str = "750m",
    AVAILABLE_CPU: str = "",
    COLOCATE_PODS: bool = False,
    COLOCATE_NAMESPACES: bool = False,
    PIN_CPU: bool = True,
    PIN_MEMORY: bool = True,
    RESERVED_POOL_NAMESPACES: str = "",
    PREFER_SHARED_CPUS: bool = False,
    PREFER_ISOLATED_CPUS: bool = False,
    UNLIMITED_BURSTABLE: str = "",
) -> dict[str, Any]:
    """policies.test-suite/topology-aware/helm-config.yaml.in's ``config``, instantiated."""
    cfg: dict[str, Any] = {}
    if AVAILABLE_CPU:
        cfg["availableResources"] = {"cpu": AVAILABLE_CPU}
    cfg["reservedResources"] = {"cpu": RESERVED_CPU}
    cfg.update(colocatePods=COLOCATE_PODS, colocateNamespaces=COLOCATE_NAMESPACES,
               pinCPU=PIN_CPU, pinMemory=PIN_MEMORY)  # fmt: skip
    if RESERVED_POOL_NAMESPACES:
        cfg["reservedPoolNamespaces"] = RESERVED_POOL_NAMESPACES.split()
    cfg.update(preferSharedCPUs=PREFER_SHARED_CPUS, preferIsolatedCPUs=PREFER_ISOLATED_CPUS)
    if UNLIMITED_BURSTABLE:
        cfg["unlimitedBurstable"] = UNLIMITED_BURSTABLE
    cfg["instrumentation"] = {"httpEndpoint": ":8891"}
    cfg["log"] = {
        "debug": ["resource-manager", "cache", "libmem", "policy"],
        "source": True,
        "klog": {"skip_headers": True},
    }
    return cfg


KIND = "TopologyAwarePolicy"


def config_spec(values: Mapping[str, Any]) -> PolicySpec:
    return structure_spec(helm_merge(CHART_DEFAULTS, values), KIND)


def annotation_lines(lines: Sequence[str]) -> dict[str, str]:
    """``ANNn='key: value'`` lines, read as the template's YAML reads them."""
    out: dict[str, str] = {}
    for line in lines:
        for k, v in (yaml.safe_load(line) or {}).items():
            out[str(k)] = v if isinstance(v, str) else yaml.safe_dump(v).strip()
    return out


def _amounts(cpu: str, mem: str) -> dict[str, str]:
    return {k: v for k, v in (("cpu", cpu), ("memory", mem)) if v not in ("", "0")}


def manifest(
    template: str,
    name: str,
    *,
    namespace: str = "default",
    annotations: Mapping[str, str] | None = None,
    **var: Any,
) -> dict[str, Any]:
    """A Pod from ``test/e2e/files/<template>.yaml.in`` (``guaranteed`` also stands for the
    tests' own ``*-annotated`` and ``+affinity`` variants, which differ only in how the
    annotations are injected)."""
    v = {**TEMPLATE_DEFAULTS, **var}
    if template == "guaranteed":
        res: dict[str, Any] = {"requests": _amounts(v["CPU"], v["MEM"]),
                               "limits": _amounts(v["CPU"], v["MEM"])}  # fmt: skip
    elif template == "burstable":
        res = {"requests": _amounts(v["CPUREQ"], v["MEMREQ"]),
               "limits": _amounts(v["CPULIM"], v["MEMLIM"])}  # fmt: skip
    elif template == "besteffort":
        res = {}
    else:
        raise ValueError(f"unknown e2e template {template!r}")

    def ctr(n: int, suffix: str = "") -> dict[str, Any]:
        c: dict[str, Any] = {"name": f"{name}c{n}{suffix}", "image": "quay.io/prometheus/busybox"}
        if res:
            c["resources"] = res
        return c

    spec: dict[str, Any] = {"containers": [ctr(i) for i in range(int(v["CONTCOUNT"]))]}
    if template == "guaranteed" and v.get("ICONTCOUNT"):
        spec["initContainers"] = [ctr(i, "i") for i in range(int(v["ICONTCOUNT"]))]
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": {"app": name}}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


class _InProcess(Runtime):
    """The in-process runtime, with containers that exit (kubelet keeps them stopped)."""

    def __init__(self, policy: TopologyAwarePolicy) -> None:
        super().__init__(policy)
        self.stopped: set[str] = set()

    def stop(self, c: Container) -> None:
        self.stopped.add(c.id)
        self.apply(self.policy.stop_container(self.pods[c.pod_id], c))

    def remove(self, c: Container) -> None:
        if c.id in self.stopped:
            self.stopped.discard(c.id)
            updates = self.policy.remove_container(self.pods[c.pod_id], c)
            del self.containers[c.id], self.cpus[c.id], self.mems[c.id]
            self.apply(updates)
        else:
            super().remove(c)

    def apply(self, updates: list[Update]) -> None:
        super().apply([u for u in updates if u.container_id not in self.stopped])


class Scenario:
    """One upstream test: pods are numbered pod0, pod1... as the e2e framework numbers
    them (``first_pod`` for a phase that starts after ``reset counters`` or later)."""

    def __init__(
        self,
        tmp_path: Path,
        topology: VmTopology,
        values: Mapping[str, Any],
        *,
        online: Sequence[int] | None = None,
        first_pod: int = 0,
        control_plane: bool = True,
        write: bool = True,
    ) -> None:
        self.root = tmp_path
        if write:
            write_vm_sysfs(tmp_path, topology, online)
        self.system: System = discover(str(tmp_path))
        self.names = Names(self.system)
        self.spec = config_spec(values)
        self.policy = TopologyAwarePolicy()
        self.runtime: _InProcess | SimulatedRuntime | Any
        self.on_guest = GUEST is not None
        if GUEST is not None:
            self.runtime = GUEST(KIND, helm_merge(CHART_DEFAULTS, values), topology, Refused)
            control_plane = False  # the guest's control-plane pods are there already
        elif SIMULATED:
            self.runtime = SimulatedRuntime(self.policy, self.spec, str(tmp_path), Refused)
            OPEN.append(self.runtime)
        else:
            self.policy.setup(self.spec, PolicyEnv(host_root=str(tmp_path)))
            self.runtime = _InProcess(self.policy)
        self.next_pod = first_pod
        self.pods: dict[str, tuple[Pod, list[Container]]] = {}
        self.app: dict[str, Container] = {}
        if control_plane:
            self.control_plane()

    # -- pods -----------------------------------------------------------------------------

    def create(
        self,
        template: str,
        *,
        namespace: str = "default",
        ann: Sequence[str] = (),
        annotations: Mapping[str, str] | None = None,
        name: str | None = None,
        **var: Any,
    ) -> str:
        """``[VAR=...] create TEMPLATE``: the next pod; returns its name. ``ann`` are the
        ``ANNn``/``ANNOTATIONS`` lines; ``annotations`` ready-made ones (block scalars)."""
        if name is None:
            name = f"pod{self.next_pod}"
            self.next_pod += 1
        anns = {**annotation_lines(ann), **(annotations or {})}
        doc = manifest(template, name, namespace=namespace, annotations=anns, **var)
        workload = parse_workload(yaml.safe_dump(doc), f"{template} {name}")
        assert not workload.problems, workload.problems
        (step,) = workload.steps
        assert isinstance(step, AddPod)
        # kubelet's capacity for the Burstable oom_score_adj: the node's memory.
        nri = nri_pod(step.pod, memory_capacity=sum(n.memory for n in self.system.nodes.values()))
        made: list[Container] = []
        self.pods[name] = (nri.pod, made)
        for spec, c in nri.containers:
            try:
                self.runtime.create((nri.pod, c))
            except Refused:
                raise
            except Exception as e:  # the in-process policy's refusal
                raise Refused(f"{c.name}: {e}") from e
            made.append(c)
            if spec.role is Role.INIT:
                self.runtime.stop(c)
            else:
                self.app[c.name] = c
        return name

    def try_create(self, template: str, **kw: Any) -> Refused | None:
        """A ``create`` expected to fail (``wait=""``): the error, or None if it worked."""
        try:
            self.create(template, **kw)
        except Refused as e:
            return e
        return None

    def control_plane(self) -> None:
        """The kube-system pods of upstream's kubeadm VM, there before the policy starts:
        kubeadm's requests (apiserver 250m, controller-manager 200m, scheduler 100m, etcd
        100m + 100Mi) and two coredns (100m, 70Mi, limit 170Mi)."""
        pods = [("kube-apiserver", "250m", ""), ("kube-controller-manager", "200m", ""),
                ("kube-scheduler", "100m", ""), ("etcd", "100m", "100Mi")]  # fmt: skip
        for pod_name, cpu, mem in pods:
            self.create("burstable", name=pod_name, namespace="kube-system",
                        CPUREQ=cpu, CPULIM="", MEMREQ=mem, MEMLIM="")  # fmt: skip
        for pod_name in ("coredns-a", "coredns-b"):
            self.create("burstable", name=pod_name, namespace="kube-system",
                        CPUREQ="100m", CPULIM="", MEMREQ="70Mi", MEMLIM="170Mi")  # fmt: skip

    def exit(self, container: str) -> None:
        """The container's process exits for good (``restartPolicy`` aside)."""
        c = self.app.pop(container)
        self.runtime.stop(c)

    def delete(self, *names: str) -> None:
        for name in names:
            p, made = self.pods.pop(name)
            for c in made:
                self.runtime.remove(c)
                self.app.pop(c.name, None)
            if isinstance(self.runtime, _InProcess):
                self.policy.remove_pod_sandbox(p)

    def delete_all(self, namespace: str = "default") -> None:
        """``kubectl delete pods --all [-n NS]``."""
        self.delete(*[n for n, (p, _) in self.pods.items() if p.namespace == namespace])

    # -- checks ---------------------------------------------------------------------------

    def env(self) -> dict[str, Any]:
        cpus = self.runtime.cpus
        mems = self.runtime.mems
        # Upstream looks at the processes named podXcY (``echo podXcY; sleep inf``).
        running = {n: c.id for n, c in self.app.items() if c.id in cpus and POD_C.match(n)}
        return namespace(
            self.names,
            {n: cpus[cid] for n, cid in running.items()},
            {n: mems[cid] for n, cid in running.items()},
            {} if self.on_guest else {"allocations": self.allocations()},
        )

    def allocations(self) -> set[str]:
        """Container names the policy holds an allocation for (upstream's ``allocations``)."""
        engine = self.policy.engine
        return {n for n, c in self._all().items() if engine.allocation(c.id) is not None}

    def _all(self) -> dict[str, Container]:
        return {c.name: c for _, made in self.pods.values() for c in made}

    def verify(self, *expressions: str) -> None:
        check(self.env(), *expressions)
