"""The real kube-scheduler allocates CPUs from a ResourceSlice our publisher wrote.

The slice is published by ``SlicePublisher`` (the daemon's own code) with per-CPU devices shaped
like topology-aware's; kube-scheduler (no feature gates; v1.35.4 and v1.37.2 on the session's
API server of each, or the version a nox session names) reads it, the DeviceClass and a claim
for 3 CPUs on one NUMA node, and allocates. NUMA node 0 has only 2 devices and comes
first, so plain first fit would split the claim across nodes: the constraint must be honoured.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
import trio

from nri_resmgr.backoff import Backoff
from nri_resmgr.dra.kubeletplugin.devices import Device
from nri_resmgr.dra.kubeletplugin.publisher import SlicePublisher
from nri_resmgr.kube import KubeClient
from nri_resmgr.kube.resources import NODES, PODS, RESOURCE_CLAIMS
from tests.dra import chain
from tests.dra.scheduler import Scheduler, start_scheduler
from tests.kube.apiserver import ApiServer, session_apiserver
from tests.kube.versions import kube_versions

pytestmark = pytest.mark.integration

DRIVER = "chain-test.nri.io"
NUMA = f"{DRIVER}/numaNode"
# cpu1-2 on NUMA node 0, cpu3-6 on node 1: published in this order.
CPUS = {1: 0, 2: 0, 3: 1, 4: 1, 5: 1, 6: 1}


@pytest.fixture(scope="module", params=kube_versions())
def server(request: pytest.FixtureRequest) -> ApiServer:
    """The session's API server of the version the module runs at."""
    return session_apiserver(request, request.param)


@pytest.fixture(scope="module")
def scheduler(server: ApiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scheduler]:
    version = server.version
    log = tmp_path_factory.mktemp(f"scheduler-{version}") / "scheduler.log"
    running = start_scheduler(server, log, version)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
async def cluster(
    server: ApiServer, scheduler: Scheduler
) -> AsyncIterator[tuple[KubeClient, str, str]]:
    async with KubeClient(server.config()) as client:
        ns, node = f"chain-{uuid.uuid4().hex[:6]}", f"chain-node-{uuid.uuid4().hex[:6]}"
        await chain.scaffold(client, ns, node, DRIVER)
        yield client, ns, node
        await client.delete(NODES, node)


def devices() -> list[Device]:
    return [Device(f"cpu{cpu}", {"cpuID": cpu, "numaNode": numa}) for cpu, numa in CPUS.items()]


async def test_scheduler_allocates_one_numa_node_from_our_slice(
    cluster: tuple[KubeClient, str, str], scheduler: Scheduler
) -> None:
    client, ns, node = cluster

    async def current() -> list[Device]:
        return devices()

    publisher = SlicePublisher(
        client, current, DRIVER, node, backoff=Backoff(initial=0.1, maximum=1.0)
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(publisher.run)
        await client.create(RESOURCE_CLAIMS, chain.claim("three", DRIVER, 3, NUMA), ns)
        await client.create(PODS, chain.pod("app", "three", 3), ns)
        try:
            got = await chain.allocated(client, ns, "three")
            bound = await chain.bound(client, ns, "app")
        except trio.TooSlowError:
            pytest.fail(f"no allocation; scheduler log:\n{scheduler.tail()}")
        finally:
            nursery.cancel_scope.cancel()

    results = got["status"]["allocation"]["devices"]["results"]
    assert {(r["driver"], r["pool"], r["request"]) for r in results} == {(DRIVER, node, "cpus")}
    assert sorted(r["device"] for r in results) == ["cpu3", "cpu4", "cpu5"]
    assert got["status"]["reservedFor"] == [
        {"resource": "pods", "name": "app", "uid": bound["metadata"]["uid"]}
    ]
    assert bound["spec"]["nodeName"] == node
    await chain.release(client, ns, "app", "three")
