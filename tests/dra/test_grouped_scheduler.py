"""Grouped devices against the real kube-apiserver and kube-scheduler v1.37.2 (issue 33 item 2;
``nox -s scheduler`` runs them at v1.36.3).

topology-aware on the synthetic n4c128 machine (2 sockets, 4 NUMA nodes of 32 CPUs, CPU 0
reserved) in grouped mode with NUMA nodes 1-3 set apart for claims; its devices are published
by the daemon's own ``SlicePublisher`` and CPU driver. Claims for 1, 4, 16 and 32 CPUs of one
NUMA node (``capacity.requests``, a CEL selector on ``numaNode``) are allocated by the real
scheduler, the pod bound, and the allocation prepared by the daemon's claim service reading
the claim from the API server: the whole-NUMA-node claim that per-CPU devices cannot get
(10 s scheduler timeout) is allocated and prepared here. A claim that cannot fit is refused
without the timeout. With ``groupBy: socket`` a whole-socket claim is allocated and prepared;
with per-CPU devices (the default mode) a 4-CPU same-NUMA claim still is, at 1.37.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from nri_resmgr.config.models import DraConfig
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.dra.kubeletplugin.claims import ClaimRef
from nri_resmgr.dra.kubeletplugin.node_service import ClaimService
from nri_resmgr.kube import KubeClient
from nri_resmgr.kube.resources import PODS, RESOURCE_CLAIMS
from nri_resmgr.sim.machine import MACHINES as LAYOUTS
from nri_resmgr.sim.synthetic import write_sysfs
from tests.dra import chain
from tests.dra.claim_setup import DRIVER, NODE, Node, make_node
from tests.dra.scheduler import Scheduler, scheduler_stack, scheduler_versions
from tests.kube.apiserver import ApiServer
from tests.policies.workload import topology_spec

pytestmark = pytest.mark.integration

[VERSION] = scheduler_versions("v1.37.2")
GROUPED = "32-127"  # NUMA nodes 1-3; node 0 (CPU 0 reserved) stays native
JSON = dict[str, Any]


@pytest.fixture(scope="module")
def grouped_stack(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ApiServer, Scheduler]]:
    with scheduler_stack(tmp_path_factory, "grouped", VERSION) as stack:
        yield stack


@attrs.define
class Cluster:
    client: KubeClient
    ns: str
    node: Node
    service: ClaimService
    scheduler: Scheduler


@pytest.fixture
def grouping() -> tuple[str, str] | None:
    """(groupBy, groupedCPUs); a test parametrizes it to group otherwise, or None for per-CPU
    devices."""
    return "numanode", GROUPED


@pytest.fixture
async def cluster(
    grouped_stack: tuple[ApiServer, Scheduler],
    tmp_path: Path,
    grouping: tuple[str, str] | None,
) -> AsyncIterator[Cluster]:
    write_sysfs(tmp_path, LAYOUTS["n4c128"])
    dra = DraConfig(enabled=True)
    if grouping is not None:
        by, grouped = grouping
        dra = DraConfig(enabled=True, cpu_device_mode="grouped", group_by=by, grouped_cpus=grouped)  # type: ignore[arg-type]
    node = make_node(tmp_path, spec=topology_spec(dra=dra))
    grouped_apiserver, grouped_scheduler = grouped_stack
    async with KubeClient(grouped_apiserver.config()) as client:
        ns = f"grouped-{uuid.uuid4().hex[:6]}"
        await chain.scaffold(client, ns, NODE, DRIVER, cpus=128)
        publisher = chain.publisher(client, node.driver.devices, DRIVER, NODE)
        async with trio.open_nursery() as nursery:
            await nursery.start(publisher.run)
            service = ClaimService(node.driver, DRIVER, client)
            yield Cluster(client, ns, node, service, grouped_scheduler)
            nursery.cancel_scope.cancel()


def capacity_claim(name: str, cpus: int, numa: int, attribute: str = "numaNode") -> JSON:
    selector = f'device.attributes["{DRIVER}"].{attribute} == {numa}'
    return {
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "cpus", "exactly": {
            "deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 1,
            "selectors": [{"cel": {"expression": selector}}],
            "capacity": {"requests": {"cpu": str(cpus)}}}}]}},
    }  # fmt: skip


async def schedule(
    c: Cluster, name: str, cpus: int, numa: int, attribute: str = "numaNode"
) -> tuple[JSON, JSON, float]:
    """Claim + pod created; (claim, pod, seconds from pod created to bound)."""
    await c.client.create(RESOURCE_CLAIMS, capacity_claim(name, cpus, numa, attribute), c.ns)
    started = time.monotonic()
    await c.client.create(PODS, chain.pod(name, name, cpus), c.ns)
    try:
        with trio.fail_after(30):
            while not (pod := await c.client.get(PODS, name, c.ns))["spec"].get("nodeName"):
                await trio.sleep(0.005)
    except trio.TooSlowError:
        pytest.fail(f"{name} not scheduled; scheduler log:\n{c.scheduler.tail()}")
    bound = time.monotonic() - started
    return await chain.allocated(c.client, c.ns, name), pod, bound


async def test_claims_up_to_a_whole_numa_node_are_allocated_bound_and_prepared(
    cluster: Cluster,
) -> None:
    c = cluster
    published = [d.name for d in await c.node.driver.devices()]
    assert published == ["numa1", "numa2", "numa3"]
    latencies = []
    for cpus, numa in ((1, 1), (4, 2), (16, 3), (32, 1)):
        if cpus == 32:  # the whole node: the 1-CPU claim on it goes first
            await release(c, "c1")
        name = f"c{cpus}"
        claim, _pod, bound = await schedule(c, name, cpus, numa)
        latencies.append(bound)
        [result] = claim["status"]["allocation"]["devices"]["results"]
        assert (result["driver"], result["pool"], result["device"]) == (DRIVER, NODE, f"numa{numa}")
        assert result["consumedCapacity"] == {"cpu": str(cpus)}
        assert result.get("shareID")
        ref = ClaimRef(claim["metadata"]["uid"], c.ns, name)
        [outcome] = (await c.service.prepare([ref])).values()
        assert outcome.error == ""
        prepared = c.node.policy.claims.cpus()[ref.uid]
        node_cpus = CpuSet(range(32 * numa, 32 * numa + 32))
        assert len(prepared) == cpus and prepared.issubset(node_cpus)
    print(f"\ngrouped, kube-scheduler {VERSION}, pod created -> bound (1, 4, 16, 32 CPUs): "
          + ", ".join(f"{s * 1000:.0f} ms" for s in latencies)
          + f"; median {statistics.median(latencies) * 1000:.0f} ms")  # fmt: skip


@pytest.mark.parametrize("grouping", [("socket", "64-127")])
async def test_a_whole_socket_claim_is_allocated_and_prepared(cluster: Cluster) -> None:
    c = cluster
    assert [d.name for d in await c.node.driver.devices()] == ["socket1"]
    claim, _pod, bound = await schedule(c, "socket", 64, 1, "socketID")
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert (result["device"], result["consumedCapacity"]) == ("socket1", {"cpu": "64"})
    ref = ClaimRef(claim["metadata"]["uid"], c.ns, "socket")
    [outcome] = (await c.service.prepare([ref])).values()
    assert outcome.error == ""
    assert c.node.policy.claims.cpus()[ref.uid] == CpuSet(range(64, 128))
    print(f"\ngrouped by socket, kube-scheduler {VERSION}: a 64-CPU claim bound in "
          f"{bound * 1000:.0f} ms")  # fmt: skip


@pytest.mark.parametrize("grouping", [None])
async def test_per_cpu_devices_still_serve_small_claims_at_1_37(cluster: Cluster) -> None:
    c = cluster
    assert len(await c.node.driver.devices()) == 127  # one per CPU, CPU 0 reserved
    numa = f"{DRIVER}/numaNode"
    await c.client.create(RESOURCE_CLAIMS, chain.claim("four", DRIVER, 4, numa), c.ns)
    await c.client.create(PODS, chain.pod("four", "four", 4), c.ns)
    claim = await chain.allocated(c.client, c.ns, "four")
    devices = [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]]
    cpus = CpuSet(int(d.removeprefix("cpu")) for d in devices)
    assert len(cpus) == 4 and len({cpu // 32 for cpu in cpus}) == 1, devices
    ref = ClaimRef(claim["metadata"]["uid"], c.ns, "four")
    [outcome] = (await c.service.prepare([ref])).values()
    assert outcome.error == ""
    assert c.node.policy.claims.cpus()[ref.uid] == cpus
    await release(c, "four")


async def test_a_claim_that_cannot_fit_is_refused_without_the_allocation_timeout(
    cluster: Cluster,
) -> None:
    c = cluster
    await c.client.create(RESOURCE_CLAIMS, capacity_claim("big", 33, 2), c.ns)
    started = time.monotonic()
    await c.client.create(PODS, chain.pod("big", "big", 33), c.ns)
    with trio.fail_after(30):
        while not unschedulable(await c.client.get(PODS, "big", c.ns)):
            await trio.sleep(0.01)
    refused = time.monotonic() - started
    print(f"\ngrouped, kube-scheduler {VERSION}: a 33-CPU claim refused in {refused * 1000:.0f} ms")
    assert "timed out" not in c.scheduler.tail(200)
    await chain.release(c.client, c.ns, "big", "big")


def unschedulable(pod: JSON) -> bool:
    return any(
        cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable"
        for cond in (pod.get("status") or {}).get("conditions") or []
    )


async def release(c: Cluster, name: str) -> None:
    claim = await c.client.get(RESOURCE_CLAIMS, name, c.ns)
    await c.service.unprepare([ClaimRef(claim["metadata"]["uid"], c.ns, name)])
    await chain.release(c.client, c.ns, name, name)
