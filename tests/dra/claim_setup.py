"""A node for claim tests: topology-aware on the synthetic n4c16 machine, the resource manager
with a runtime that applies its updates, the CPU driver, and the kubelet-plugin layer's claim
service over it (``preparer``, what kubelet's calls reach) against an in-process claim store
(the fast stand-in for the API server; the real one is in test_claims_apiserver)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from nri_resmgr.config.models import PolicySpec
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.dra.cpu.cdi import CdiWriter
from nri_resmgr.dra.cpu.driver import CpuDriver
from nri_resmgr.dra.cpu.state import ClaimStore
from nri_resmgr.dra.kubeletplugin.claims import ClaimRef
from nri_resmgr.dra.kubeletplugin.metadata import MetadataWriter
from nri_resmgr.dra.kubeletplugin.node_service import ClaimService
from nri_resmgr.kube import ApiResource, KubeObject, NotFound
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from nri_resmgr.resmgr.manager import ResourceManager
from nri_resmgr.resmgr.model import Container, Pod, Update, claim_env_name, claims_from_env
from nri_resmgr.resmgr.policy import Policy, PolicyEnv
from tests.policies.workload import Runtime, topology_spec
from tests.sysfs.fakesys import N4C16, write_sysfs

DRIVER = "topology-aware.nri.io"
NODE = "node-1"


def claim_object(
    uid: str,
    devices: Sequence[str],
    *,
    name: str | None = None,
    driver: str = DRIVER,
    pool: str = NODE,
    request: str = "cpus",
    **result_extra: Any,
) -> KubeObject:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name or f"claim-{uid}", "namespace": "default", "uid": uid},
        "spec": {"devices": {"requests": [spec_request(request, driver)]}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": request, "driver": driver, "pool": pool, "device": d}
                        | result_extra
                        for d in devices
                    ]
                }
            }
        },
    }


def spec_request(request: str, device_class: str) -> KubeObject:
    """The claim's request a result names: ``req`` (``exactly``) or, for ``req/sub``, a
    prioritized list with that one sub-request."""
    base, slash, sub = request.partition("/")
    if slash:
        return {"name": base, "firstAvailable": [{"name": sub, "deviceClassName": device_class}]}
    return {"name": request, "exactly": {"deviceClassName": device_class}}


class Claims:
    """ResourceClaims by namespace/name (the ``get`` of ``KubeApi``), with an injectable
    failure."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], KubeObject] = {}
        self.error: Exception | None = None
        self.gets = 0

    def add(self, obj: KubeObject) -> None:
        meta = obj["metadata"]
        self.objects[(meta["namespace"], meta["name"])] = obj

    async def get(
        self,
        resource: ApiResource,
        name: str,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> KubeObject:
        self.gets += 1
        assert resource.plural == "resourceclaims"
        if self.error is not None:
            raise self.error
        obj = self.objects.get((namespace or "", name))
        if obj is None:
            raise NotFound(404, "NotFound", f'resourceclaims "{name}" not found')
        return copy.deepcopy(obj)


class AppliedRuntime:
    """The manager's RuntimeUpdater: applies UpdateContainers to a Runtime view."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.batches: list[list[Update]] = []

    async def update_containers(self, updates: Sequence[Update]) -> list[Update]:
        self.batches.append(list(updates))
        self.runtime.apply(list(updates))
        return []


@attrs.define
class Node:
    root: Path
    policy: Any  # TopologyAwarePolicy unless ``make_node`` was given another
    manager: ResourceManager
    runtime: Runtime
    updater: AppliedRuntime
    claims: Claims
    driver: CpuDriver
    preparer: ClaimService
    cdi_dir: Path
    state_dir: Path
    spec: PolicySpec
    driver_name: str = DRIVER
    policy_class: Callable[[], Policy] = TopologyAwarePolicy

    @property
    def plugin_dir(self) -> Path:
        return self.root / "plugins" / self.driver_name

    def ref(self, uid: str) -> ClaimRef:
        meta = self.claim_meta(uid)
        return ClaimRef(uid, meta.get("namespace", "default"), meta.get("name", f"claim-{uid}"))

    def claim_meta(self, uid: str) -> dict[str, Any]:
        for obj in self.claims.objects.values():
            if obj["metadata"]["uid"] == uid:
                return dict(obj["metadata"])
        return {"namespace": "default", "name": f"claim-{uid}"}

    def injected(self, c: Container, uid: str, **kw: Any) -> Container:
        return injected(self.cdi_dir, c, uid, **kw)

    def restart(self, spec: PolicySpec | None = None) -> Node:
        """A new daemon on the same machine, state and CDI directories (and configuration,
        unless ``spec``); the runtime keeps its containers (the caller synchronizes)."""
        return make_node(
            self.root, self.cdi_dir, self.state_dir, self.claims, self.runtime,
            spec=spec or self.spec, policy_class=self.policy_class, driver_name=self.driver_name,
        )  # fmt: skip


def make_node(
    root: Path,
    cdi_dir: Path | None = None,
    state_dir: Path | None = None,
    claims: Claims | None = None,
    old_runtime: Runtime | None = None,
    *,
    spec: PolicySpec | None = None,
    policy_class: Callable[[], Policy] = TopologyAwarePolicy,
    driver_name: str = DRIVER,
) -> Node:
    if not (root / "sys").exists():
        write_sysfs(root, N4C16)
    cdi_dir = cdi_dir or root / "cdi"
    state_dir = state_dir or root / "state"
    policy = policy_class()
    spec = spec or topology_spec()
    manager = ResourceManager(policy, spec, PolicyEnv(host_root=str(root)))
    runtime = Runtime(policy)
    if old_runtime is not None:
        runtime.pods, runtime.containers = old_runtime.pods, old_runtime.containers
        runtime.cpus, runtime.mems = old_runtime.cpus, old_runtime.mems
    updater = AppliedRuntime(runtime)
    manager.attach_runtime(updater)
    claims = claims or Claims()
    name = driver_name
    driver = CpuDriver(manager, name, NODE, ClaimStore(state_dir), CdiWriter(cdi_dir, name))
    driver.restore(policy)
    metadata = MetadataWriter(name, root / "plugins" / name, cdi_dir)
    preparer = ClaimService(driver, name, claims, metadata=metadata)  # type: ignore[arg-type]
    return Node(
        root, policy, manager, runtime, updater, claims, driver, preparer, cdi_dir, state_dir,
        spec, name, policy_class,
    )  # fmt: skip


def with_claim_env(c: Container, uid: str, cpus: str, key: str | None = None) -> Container:
    """``c`` with the claim variables a pod spec could set itself (a forger's env)."""
    keys = {**c.claim_keys, uid: key} if key is not None else c.claim_keys
    return attrs.evolve(c, claims={**c.claims, uid: cpus}, claim_keys=keys)


def injected(
    cdi_dir: Path, c: Container, uid: str, *, cdi_devices: Sequence[str] | None = None
) -> Container:
    """``c`` as containerd creates it once the claim's CDI device was injected: the env
    edits of the claim's spec on disk applied; ``cdi_devices`` as a containerd >= 2.3
    reports them (older ones report none)."""
    [spec_file] = cdi_dir.glob(f"*-cpu_claim-{uid}.json")
    [device] = json.loads(spec_file.read_text())["devices"]
    cpus, keys = claims_from_env(device["containerEdits"]["env"])
    return attrs.evolve(
        c,
        claims={**c.claims, **cpus},
        claim_keys={**c.claim_keys, **keys},
        cdi_devices=tuple(cdi_devices or ()),
    )


def claim_key(cdi_dir: Path, uid: str) -> str:
    """The key the claim's CDI spec injects."""
    return injected(cdi_dir, Container("", "", ""), uid).claim_keys[uid]


def claim_cpus(cdi_dir: Path, uid: str) -> CpuSet:
    """The cpuset the claim's CDI spec injects (what its containers are pinned to)."""
    return CpuSet.parse(injected(cdi_dir, Container("", "", ""), uid).claims[uid])


def env_line(uid: str, cpus: str) -> str:
    return f"{claim_env_name(uid)}={cpus}"


__all__ = ["Pod"]
