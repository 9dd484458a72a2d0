"""scheduler-plugins' NodeResourceTopologyMatch, as published, schedules by our NRT object.

The peer (``tests/kube/nrtschedbuild.py``) is kube-scheduler v1.35.4 with the plugin of
sigs.k8s.io/scheduler-plugins registered, nothing of its code changed, run on the session's
real kube-apiserver with a profile of its own (``nri-resmgr-nrt``: the plugin on every
extension point, as the project's manifests configure it, its Reserve step off). It reads the
NodeResourceTopology object through the API exactly as in a cluster (the passthrough cache:
every Filter reads the object afresh). The object is written by our exporter from a
topology-aware policy on the n4c16 machine (4 NUMA nodes of 4 CPUs, CPU 0 reserved), and
every pod the scheduler binds is then "run": its container created in the policy, as the
runtime would, and the object written again.

Pods are pinned to the test's node (a field affinity) and tolerate its taint, so the other
tests' schedulers and pods on the shared apiserver neither see nor touch them.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from nri_resmgr.kube import KubeClient, NotFound
from nri_resmgr.kube.client import PatchType
from nri_resmgr.kube.resources import NODES, PODS
from nri_resmgr.observability.nrt import NODE_RESOURCE_TOPOLOGIES, NrtExporter, nrt_body
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy, exports
from nri_resmgr.resmgr.model import Container, ContainerState, Pod
from tests.dra.scheduler import Scheduler, schedulable_node
from tests.kube.apiserver import ApiServer
from tests.kube.nrt_crd import install_nrt_crd
from tests.kube.nrtschedbuild import BuildError, ensure_nrt_scheduler
from tests.kube.test_nrt_apiserver import PolicySource
from tests.peers import missing_peer
from tests.policies.workload import pod, resources, start, topology_spec
from tests.sysfs.fakesys import N4C16

pytestmark = pytest.mark.integration

NODE = "nrt-sched-node"
PROFILE = "nri-resmgr-nrt"
TAINT = {"key": "nri-resmgr.io/nrt-test", "value": "true", "effect": "NoSchedule"}
MEMORY = 256 << 20
BOUND_TIMEOUT = 60.0
NAMES = ("four-a", "four-b", "four-c", "four-d", "three", "two")


@pytest.fixture(scope="module")
def nrt_scheduler_binary() -> Path:
    try:
        return ensure_nrt_scheduler()
    except BuildError as exc:
        missing_peer(f"kube-scheduler with NodeResourceTopologyMatch cannot be built: {exc}")


@pytest.fixture
async def kube(apiserver: ApiServer) -> AsyncIterator[KubeClient]:
    async with KubeClient(apiserver.config()) as client:
        await install_nrt_crd(client)
        node = await schedulable_node(client, NODE, cpus=64)
        node["spec"]["taints"] = [TAINT]
        await client.replace(NODES, node)
        yield client
        for name in NAMES:
            await remove_pod(client, name)
        await client.delete(NODES, NODE)


@pytest.fixture
def scheduler(
    kube: KubeClient, apiserver: ApiServer, nrt_scheduler_binary: Path, tmp_path: Path
) -> Iterator[Scheduler]:
    config = tmp_path / "scheduler.yaml"
    config.write_text(_config(apiserver.kubeconfig))
    running = Scheduler(nrt_scheduler_binary, tmp_path / "scheduler.log",
                        extra_args=(f"--config={config}",))  # fmt: skip
    running.start(apiserver.kubeconfig)
    yield running
    running.stop()


def _config(kubeconfig: Path) -> str:
    return f"""apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection: {{leaderElect: false}}
clientConnection: {{kubeconfig: "{kubeconfig}"}}
profiles:
- schedulerName: {PROFILE}
  plugins:
    multiPoint: {{enabled: [{{name: NodeResourceTopologyMatch}}]}}
    reserve: {{disabled: [{{name: NodeResourceTopologyMatch}}]}}
  pluginConfig:
  - name: NodeResourceTopologyMatch
    args: {{scoringStrategy: {{type: LeastAllocated}}}}
"""


class Node:
    """The node's side: the policy that places the containers and the NRT it publishes."""

    def __init__(self, kube: KubeClient, tmp_path: Path) -> None:
        self.kube = kube
        self.policy = TopologyAwarePolicy()
        start(self.policy, tmp_path, N4C16, topology_spec(reserved="cpuset:0"))
        self.exporter = NrtExporter(kube, NODE, PolicySource(self.policy), trio.sleep_forever)
        self.running: dict[str, tuple[Pod, Container]] = {}

    async def publish(self) -> None:
        await self.exporter.publish()

    def available(self) -> dict[str, str]:
        """Per NUMA zone: its cpu ``available`` as last published."""
        zones = (self.exporter.published or {}).get("zones") or []
        return {
            z["name"]: next(r["available"] for r in z["resources"] if r["name"] == "cpu")
            for z in zones
            if z["type"] == "Node"
        }

    async def run(self, name: str, cpus: int) -> int:
        """The bound pod's container, created as the runtime would: returns its NUMA node."""
        p = pod(name, "guaranteed")
        c = Container(id=f"{name}-c0", pod_id=p.id, name="c0", state=ContainerState.RUNNING,
                      resources=resources(1000 * cpus, 1000 * cpus, MEMORY))  # fmt: skip
        self.policy.create_container(p, c)
        self.running[name] = (p, c)
        a = self.policy.engine.allocation(c.id)
        assert a is not None and a.cpus is not None and len(a.exclusive) == cpus
        nodes = self.policy.engine.system.nodes_of(a.cpus)
        assert len(nodes) == 1, f"{name}: CPUs {a.cpus} span NUMA nodes {nodes}"
        await self.publish()
        return nodes[0]

    async def stop(self, name: str) -> int:
        """The pod's container removed: returns the NUMA node it held."""
        p, c = self.running.pop(name)
        a = self.policy.engine.allocation(c.id)
        assert a is not None and a.cpus is not None
        self.policy.remove_container(p, c)
        await self.publish()
        return self.policy.engine.system.nodes_of(a.cpus)[0]


def pod_object(name: str, cpus: int) -> dict[str, Any]:
    amount = {"cpu": str(cpus), "memory": str(MEMORY)}
    on_node = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": PROFILE,
            "containers": [{"name": "c0", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": amount, "limits": amount}}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [on_node]}}},
            "tolerations": [{**TAINT, "operator": "Equal"}],
        },
    }  # fmt: skip


async def remove_pod(kube: KubeClient, name: str) -> None:
    """Deleted at once: a bound pod would otherwise wait for a kubelet that never comes."""
    options = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
    with contextlib.suppress(NotFound):
        await kube.request("DELETE", PODS.object_path(name, "default"), body=options)


async def submit(kube: KubeClient, name: str, cpus: int) -> None:
    await kube.create(PODS, pod_object(name, cpus), "default")


async def bound(kube: KubeClient, name: str, scheduler: Scheduler) -> str:
    with trio.move_on_after(BOUND_TIMEOUT):
        while True:
            got = await kube.get(PODS, name, "default")
            if got["spec"].get("nodeName"):
                return str(got["spec"]["nodeName"])
            await trio.sleep(0.1)
    raise AssertionError(f"{name} not bound in {BOUND_TIMEOUT}s\n{scheduler.tail()}")


async def refused(kube: KubeClient, name: str, scheduler: Scheduler) -> str:
    """The scheduler's message once it has found no node for the pod."""
    with trio.move_on_after(BOUND_TIMEOUT):
        while True:
            got = await kube.get(PODS, name, "default")
            assert not got["spec"].get("nodeName"), f"{name} was bound"
            for c in (got.get("status") or {}).get("conditions") or []:
                if c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable":
                    return str(c.get("message", ""))
            await trio.sleep(0.1)
    raise AssertionError(f"{name} not refused in {BOUND_TIMEOUT}s\n{scheduler.tail()}")


async def test_the_plugin_schedules_by_the_numa_zones_as_containers_come_and_go(
    kube: KubeClient, scheduler: Scheduler, tmp_path: Path
) -> None:
    node = Node(kube, tmp_path)
    await node.publish()
    assert node.available() == {"node-0": "3", "node-1": "4", "node-2": "4", "node-3": "4"}

    # Three 4-CPU pods: each fits a whole NUMA node; the policy puts each in its own.
    used = set()
    for name in ("four-a", "four-b", "four-c"):
        await submit(kube, name, 4)
        assert await bound(kube, name, scheduler) == NODE
        used.add(await node.run(name, 4))
    assert used == {1, 2, 3}
    # Node 0's 3 CPUs are now the root's only shared ones, and the root keeps one.
    assert node.available() == {"node-0": "2", "node-1": "0", "node-2": "0", "node-3": "0"}

    # The Node has 64 CPUs for NodeResourcesFit, but no NUMA node has 4 or 3 left: refused
    # by NodeResourceTopologyMatch (its message); 2 CPUs fit node 0.
    for name, cpus in (("four-d", 4), ("three", 3)):
        await submit(kube, name, cpus)
        message = await refused(kube, name, scheduler)
        assert "cannot align container" in message, message
    await remove_pod(kube, "three")
    await submit(kube, "two", 2)
    assert await bound(kube, "two", scheduler) == NODE
    assert await node.run("two", 2) == 0

    # A 4-CPU container goes: the object is written again, the waiting pod is tried again
    # (the plugin registers NRT updates as its requeue event) and bound; it runs in the
    # NUMA node that was freed.
    freed = await node.stop("four-b")
    assert node.available()[f"node-{freed}"] == "4"
    assert await bound(kube, "four-d", scheduler) == NODE
    assert await node.run("four-d", 4) == freed
    obj = await kube.get(NODE_RESOURCE_TOPOLOGIES, NODE)
    assert {"name": "topologyManagerPolicy", "value": "single-numa-node"} in obj["attributes"]


async def test_the_pool_zones_alone_give_the_plugin_nothing(
    kube: KubeClient, scheduler: Scheduler, tmp_path: Path
) -> None:
    """The object as it was before the NUMA zones (pool zones, ``TopologyPolicy`` only, as
    nri-plugins writes it): the plugin admits a pod no NUMA node can hold."""
    node = Node(kube, tmp_path)
    for name in ("four-a", "four-b", "four-c"):
        await node.run(name, 4)
    pools_only = {"apiVersion": NODE_RESOURCE_TOPOLOGIES.api_version,
                  "kind": NODE_RESOURCE_TOPOLOGIES.kind, "metadata": {"name": NODE},
                  **nrt_body(node.policy.name, exports.zones(node.policy.engine))}  # fmt: skip
    await kube.patch(NODE_RESOURCE_TOPOLOGIES, NODE, pools_only, patch_type=PatchType.APPLY,
                     field_manager="test", force=True)  # fmt: skip
    await submit(kube, "four-d", 4)
    assert await bound(kube, "four-d", scheduler) == NODE
