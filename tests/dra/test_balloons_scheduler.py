"""Balloon-type claims against the real kube-apiserver and kube-scheduler v1.37.2 and
kubelet's own DRA code (issue 38 item 4).

The balloons policy on the synthetic n4c128 machine (2 sockets, 4 NUMA nodes of 32 CPUs, CPU 0
reserved) publishes two types: ``fast`` (minCPUs 2, maxCPUs 8, CPU class ``turbo``, one device
per NUMA node) and ``wide`` (maxCPUs 64, hideHyperthreads, one device per socket); ``web`` is a
native type. The daemon's own ``SlicePublisher`` and CPU driver publish them, wired as the
daemon wires them (the policy's ``devices_changed`` triggers the publisher), served by the
kubelet-plugin layer on unix sockets that ``kubelet-dra-peer`` (kubelet's plugin manager and
DRA manager, k8s.io/kubernetes of the control plane's version) finds, registers and calls.
Claims select a type and a NUMA node or socket by CEL and ask CPUs by ``capacity.requests``;
the scheduler allocates them (a request below minCPUs rounded up to it), the pod is bound, and
kubelet prepares the pod through our plugin: each claim gets a balloon of its type with
exactly the consumed CPUs where the device says, and the container the CDI id whose spec pins
it there; kubelet's unprepare removes the balloon. A claim the node cannot host (above
maxCPUs, a type nobody publishes, more than is left once the slice was republished after
other claims) stays unschedulable, without the allocation timeout. Consumable capacity needs
1.36 or later: the default run is at v1.37.2, ``nox -s scheduler`` at v1.36.3.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from nri_resmgr.config.models import BalloonType, BalloonTypeDra, DraConfig
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.dra.kubeletplugin import KubeletPlugin
from nri_resmgr.kube import KubeClient
from nri_resmgr.kube.resources import PODS, RESOURCE_CLAIMS, RESOURCE_SLICES
from nri_resmgr.policies.balloons import BalloonsPolicy
from nri_resmgr.policies.balloons.balloon import Balloon
from nri_resmgr.policies.balloons.dra import balloon_of
from nri_resmgr.policies.balloons.state import balloon_mems
from nri_resmgr.sim.machine import MACHINES as LAYOUTS
from nri_resmgr.sim.synthetic import write_sysfs
from tests.dra import chain
from tests.dra.balloon_setup import BALLOONS_DRIVER as DRIVER
from tests.dra.balloon_setup import TURBO_KHZ, max_freq, turbo_control, write_max_freq
from tests.dra.claim_setup import NODE, Node, claim_cpus, make_node
from tests.dra.kubelet_peer import KubeletPeer, kubelet_peer, peer_binary
from tests.dra.scheduler import Scheduler, scheduler_stack, scheduler_versions
from tests.dra.test_grouped_scheduler import unschedulable
from tests.kube.apiserver import ApiServer
from tests.policies.workload import balloons_spec

pytestmark = pytest.mark.integration

[VERSION] = scheduler_versions("v1.37.2")
JSON = dict[str, Any]
TYPES = (
    BalloonType(name="fast", min_cpus=2, max_cpus=8, cpu_class="turbo",
                dra=BalloonTypeDra(publish=True)),
    BalloonType(name="wide", max_cpus=64, hide_hyperthreads=True, allocator_priority="low",
                dra=BalloonTypeDra(publish=True, group_by="socket")),
    BalloonType(name="web", max_cpus=4, namespaces=("web",)),
)  # fmt: skip


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ApiServer, Scheduler]]:
    with scheduler_stack(tmp_path_factory, "balloons", VERSION) as both:
        yield both


@pytest.fixture(scope="module")
def kubelet_binary() -> Path:
    """kubelet's DRA code of the control plane's version."""
    return peer_binary(VERSION)


@attrs.define
class Cluster:
    client: KubeClient
    ns: str
    node: Node
    kubelet: KubeletPeer
    scheduler: Scheduler

    @property
    def policy(self) -> BalloonsPolicy:
        policy: BalloonsPolicy = self.node.policy
        return policy


@pytest.fixture
async def cluster(
    aio_loop: object,  # grpclib's asyncio, under trio
    stack: tuple[ApiServer, Scheduler],
    kubelet_binary: Path,
    tmp_path: Path,
    socket_dir: Path,
) -> AsyncIterator[Cluster]:
    write_sysfs(tmp_path, LAYOUTS["n4c128"])
    write_max_freq(tmp_path, range(128))
    spec = balloons_spec("cpuset:0", dra=DraConfig(enabled=True), balloon_types=TYPES,
                         control=turbo_control())  # fmt: skip
    node = make_node(tmp_path, spec=spec, policy_class=BalloonsPolicy, driver_name=DRIVER)
    apiserver, scheduler = stack
    async with KubeClient(apiserver.config()) as client:
        ns = f"balloons-{uuid.uuid4().hex[:6]}"
        await chain.scaffold(client, ns, NODE, DRIVER, cpus=128)
        publisher = chain.publisher(client, node.driver.devices, DRIVER, NODE)
        node.policy.devices_changed = publisher.trigger  # as nri_resmgr.dra.setup wires it
        plugin = KubeletPlugin(
            node.driver, DRIVER, client, socket_dir / "plugins", socket_dir / "registry",
            publisher=publisher, cdi_dir=node.cdi_dir,
        )  # fmt: skip
        peer = kubelet_peer(kubelet_binary, kubeconfig=apiserver.kubeconfig, node=NODE,
                            registry=socket_dir / "registry", state=socket_dir / "kubelet",
                            log=tmp_path / "kubelet.log")  # fmt: skip
        (socket_dir / "registry").mkdir()
        async with peer as kubelet, trio.open_nursery() as nursery:
            await plugin.start(nursery)
            await kubelet.wait_plugin(DRIVER)
            yield Cluster(client, ns, node, kubelet, scheduler)
            await plugin.stop()
            nursery.cancel_scope.cancel()


def type_claim(name: str, cpus: int, balloon_type: str, where: str = "") -> JSON:
    attrs_ = f'device.attributes["{DRIVER}"]'
    expression = f'{attrs_}.balloonType == "{balloon_type}"' + (
        f" && {attrs_}.{where}" if where else ""
    )
    return {
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "cpus", "exactly": {
            "deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 1,
            "selectors": [{"cel": {"expression": expression}}],
            "capacity": {"requests": {"cpu": str(cpus)}}}}]}},
    }  # fmt: skip


async def submit(c: Cluster, name: str, cpus: int, balloon_type: str, where: str = "") -> None:
    await c.client.create(RESOURCE_CLAIMS, type_claim(name, cpus, balloon_type, where), c.ns)
    await c.client.create(PODS, chain.pod(name, name, cpus), c.ns)


async def scheduled_and_prepared(c: Cluster, name: str) -> tuple[JSON, Balloon, JSON]:
    """The claim as allocated, the balloon kubelet's Prepare made for it, the bound pod."""
    pod = await chain.bound(c.client, c.ns, name)
    claim = await chain.allocated(c.client, c.ns, name)
    uid = claim["metadata"]["uid"]
    prepared = await c.kubelet.prepare(pod)
    assert f"{DRIVER}/cpu=claim-{uid}" in prepared["cdi_devices"]["app"], prepared
    b = balloon_of(c.policy.state, uid)
    assert b is not None
    assert claim_cpus(c.node.cdi_dir, uid) == b.cpus  # what the container is pinned to
    return claim, b, pod


async def stays_unschedulable(c: Cluster, name: str) -> None:
    with trio.fail_after(30):
        while not unschedulable(await c.client.get(PODS, name, c.ns)):
            await trio.sleep(0.01)
    assert (await c.client.get(PODS, name, c.ns))["spec"].get("nodeName") is None
    assert "timed out" not in c.scheduler.tail(200)


async def published_capacity(c: Cluster, device: str, value: int) -> None:
    """Wait until the slice in the API server offers ``value`` CPUs on ``device``."""
    with trio.fail_after(30):
        while True:
            slices = await c.client.list(RESOURCE_SLICES, field_selector=f"spec.driver={DRIVER}")
            found = {
                d["name"]: d.get("capacity", {}).get("cpu", {}).get("value")
                for s in slices.items for d in s["spec"].get("devices") or []
            }  # fmt: skip
            if found.get(device) == str(value):
                return
            await trio.sleep(0.02)


def described(c: Cluster, result: JSON, b: Balloon) -> str:
    mems = balloon_mems(c.policy.state.system, b)
    return (f"{result['device']} consumed {result['consumedCapacity']['cpu']} -> balloon "
            f"{b.name} cpus {b.cpus} mems {mems} class {b.type.cpu_class or '-'}")  # fmt: skip


async def test_balloon_type_claims_are_allocated_prepared_and_refused_where_they_cannot_fit(
    cluster: Cluster,
) -> None:
    c = cluster
    names = [d.name for d in await c.node.driver.devices()]
    assert names == [*(f"fast-numa{n}" for n in range(4)), "wide-socket0", "wide-socket1"]
    seen = []

    await submit(c, "fast4", 4, "fast", "numaNode == 2")
    claim, fast, _ = await scheduled_and_prepared(c, "fast4")
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert (result["pool"], result["device"], result["consumedCapacity"]) == (
        NODE,
        "fast-numa2",
        {"cpu": "4"},
    )
    assert fast.type.name == "fast" and len(fast.cpus) == 4
    assert fast.cpus.issubset(CpuSet(range(64, 96)))
    assert {max_freq(c.node.root, cpu) for cpu in fast.cpus} == {TURBO_KHZ}  # CPU class turbo
    seen.append(described(c, result, fast))

    # The slice is republished: socket 1 offers 4 CPUs less to a new wide balloon.
    await published_capacity(c, "wide-socket1", 60)
    await submit(c, "wide40", 40, "wide", "socketID == 1")
    claim, wide, wide_pod = await scheduled_and_prepared(c, "wide40")
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert (result["device"], result["consumedCapacity"]) == ("wide-socket1", {"cpu": "40"})
    assert len(wide.cpus) == 40 and wide.cpus.issubset(CpuSet(range(64, 128)))
    assert wide.cpus.isdisjoint(fast.cpus)
    seen.append(described(c, result, wide))

    # 20 CPUs are left on socket 1: 21 is refused there, while without the republication
    # after fast4 the scheduler would have believed 24 free.
    await submit(c, "wide21", 21, "wide", "socketID == 1")
    await stays_unschedulable(c, "wide21")
    await submit(c, "fast9", 9, "fast")  # above maxCPUs anywhere
    await stays_unschedulable(c, "fast9")
    await submit(c, "nope", 1, "web")  # a native type publishes nothing
    await stays_unschedulable(c, "nope")

    # Below minCPUs: the scheduler rounds the request up to the device's minimum.
    await submit(c, "fast1", 1, "fast", "numaNode == 3")
    claim, fast1, _ = await scheduled_and_prepared(c, "fast1")
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert (result["device"], result["consumedCapacity"]) == ("fast-numa3", {"cpu": "2"})
    assert len(fast1.cpus) == 2 and fast1.cpus.issubset(CpuSet(range(96, 128)))
    seen.append(described(c, result, fast1))

    # A whole-NUMA-node-sized wide claim on socket 0 (CPU 0 reserved: 63 offered).
    await submit(c, "wide32", 32, "wide", "socketID == 0")
    claim, wide0, _ = await scheduled_and_prepared(c, "wide32")
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert result["device"] == "wide-socket0" and 0 not in wide0.cpus
    seen.append(described(c, result, wide0))
    print(f"\nballoons, kube-scheduler {VERSION}:\n  " + "\n  ".join(seen))

    # kubelet's unprepare removes the balloon, the CPUs are free and the slice says so.
    uid = (await c.client.get(RESOURCE_CLAIMS, "wide40", c.ns))["metadata"]["uid"]
    await c.kubelet.unprepare(wide_pod)
    assert balloon_of(c.policy.state, uid) is None and wide.cpus.issubset(c.policy.state.free())
    await published_capacity(c, "wide-socket1", 64 - len(fast.cpus) - len(fast1.cpus))
    for name in ("fast4", "wide40", "wide21", "fast9", "nope", "fast1", "wide32"):
        await chain.release(c.client, c.ns, name, name)
