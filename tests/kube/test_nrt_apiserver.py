"""The NodeResourceTopology export against a real kube-apiserver with the NRT project's CRD."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.kube import KubeClient, NotFound
from nri_resmgr.observability.nrt import NODE_RESOURCE_TOPOLOGIES, NrtExporter
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from nri_resmgr.resmgr.policy import Policy
from tests.kube.apiserver import ApiServer
from tests.kube.nrt_crd import install_nrt_crd
from tests.policies.workload import guaranteed, start, topology_spec
from tests.sysfs.fakesys import N4C16

pytestmark = pytest.mark.integration


class PolicySource:
    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.on = True

    def zones(self) -> tuple[str, list[Any]]:
        return self.policy.name, self.policy.topology_zones()

    def attributes(self) -> list[tuple[str, str]]:
        return self.policy.topology_attributes()

    def enabled(self) -> bool:
        return self.on


@pytest.fixture
async def client(apiserver: ApiServer) -> AsyncIterator[KubeClient]:
    async with KubeClient(apiserver.config()) as kube:
        await install_nrt_crd(kube)
        yield kube


def by_name(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {z["name"]: z for z in obj["zones"]}


def _attribute(zone: dict[str, Any], name: str) -> str:
    return str(next(a["value"] for a in zone["attributes"] if a["name"] == name))


def resource(zone: dict[str, Any], name: str) -> dict[str, Any]:
    return next(r for r in zone["resources"] if r["name"] == name)


async def test_the_nrt_object_has_a_zone_per_pool_and_follows_allocations(
    client: KubeClient, tmp_path: Path
) -> None:
    policy = TopologyAwarePolicy()
    start(policy, tmp_path, N4C16, topology_spec(reserved="cpuset:0"))
    source = PolicySource(policy)
    exporter = NrtExporter(client, "nrt-node-1", source, trio.sleep_forever)
    assert await exporter.publish()
    obj = await client.get(NODE_RESOURCE_TOPOLOGIES, "nrt-node-1")
    print(json.dumps({k: obj[k] for k in ("apiVersion", "kind", "attributes", "zones")}, indent=1))
    assert obj["attributes"] == [
        {"name": "TopologyPolicy", "value": "topology-aware"},
        {"name": "topologyManagerPolicy", "value": "single-numa-node"},
        {"name": "topologyManagerScope", "value": "container"},
    ]
    zones = by_name(obj)
    assert list(zones) == ["root", "socket #0", "NUMA node #0", "NUMA node #1", "socket #1",
                           "NUMA node #2", "NUMA node #3",
                           "node-0", "node-1", "node-2", "node-3"]  # fmt: skip
    assert zones["node-2"]["type"] == "Node"
    assert zones["node-2"]["costs"][2] == {"name": "node-2", "value": 10}
    numa2 = zones["NUMA node #2"]
    assert (numa2["type"], numa2["parent"]) == ("numa node", "socket #1")
    assert resource(numa2, "cpu") == {
        "name": "cpu", "capacity": "4", "allocatable": "4", "available": "4"
    }  # fmt: skip
    assert resource(numa2, "memory")["capacity"] == str(2 << 30)
    assert resource(zones["NUMA node #0"], "cpu")["capacity"] == "4"  # reserved cpu 0 included
    assert {"name": "reserved cpuset", "value": "0"} in zones["NUMA node #0"]["attributes"]

    # An exclusive 2-CPU grant: the pool it lands in has 2 CPUs less available.
    unchanged = await exporter.publish()
    pod, ctr = guaranteed("g", 2000)
    adjustment, _ = policy.create_container(pod, ctr)
    assert await exporter.publish()
    after = by_name(await client.get(NODE_RESOURCE_TOPOLOGIES, "nrt-node-1"))
    assert unchanged is False
    allocation = policy.engine.allocation(ctr.id)
    assert allocation is not None and adjustment.cpuset_cpus == str(allocation.exclusive)
    granted = after[allocation.pool]
    before_shared = CpuSet.parse(_attribute(zones[allocation.pool], "shared cpuset"))
    after_shared = CpuSet.parse(_attribute(granted, "shared cpuset"))
    assert after_shared == before_shared - allocation.exclusive
    assert int(resource(granted, "cpu")["available"]) < 4
    assert exporter.writes == 2  # created, then replaced once; the unchanged publish wrote nothing

    # agent.nodeResourceTopology off: nothing is written, and the object is left in place.
    source.on = False
    policy.remove_container(pod, ctr)
    assert not await exporter.publish()
    assert by_name(await client.get(NODE_RESOURCE_TOPOLOGIES, "nrt-node-1")) == after


async def test_a_missing_nrt_object_is_created_again(client: KubeClient, tmp_path: Path) -> None:
    policy = start(TopologyAwarePolicy(), tmp_path, N4C16, topology_spec())
    exporter = NrtExporter(client, "nrt-node-2", PolicySource(policy), trio.sleep_forever)
    assert await exporter.publish()
    await client.delete(NODE_RESOURCE_TOPOLOGIES, "nrt-node-2")
    with pytest.raises(NotFound):
        await client.get(NODE_RESOURCE_TOPOLOGIES, "nrt-node-2")
    pod, ctr = guaranteed("g", 1000)
    policy.create_container(pod, ctr)
    assert await exporter.publish()
    assert len((await client.get(NODE_RESOURCE_TOPOLOGIES, "nrt-node-2"))["zones"]) == 7 + 4


async def test_an_object_another_writer_left_is_taken_over_in_one_request(
    client: KubeClient, tmp_path: Path
) -> None:
    # As nri-plugins' agent leaves it: created with a plain create (another field manager).
    policy_attribute = {"name": "TopologyPolicy", "value": "balloons"}
    stale = {"apiVersion": NODE_RESOURCE_TOPOLOGIES.api_version, "kind": "NodeResourceTopology",
             "metadata": {"name": "nrt-node-3"}, "attributes": [policy_attribute],
             "zones": []}  # fmt: skip
    await client.create(NODE_RESOURCE_TOPOLOGIES, stale)
    policy = start(TopologyAwarePolicy(), tmp_path, N4C16, topology_spec())
    counted = CountingClient(client)
    exporter = NrtExporter(counted, "nrt-node-3", PolicySource(policy), trio.sleep_forever)
    assert await exporter.publish()
    assert counted.calls == ["patch"]
    obj = await client.get(NODE_RESOURCE_TOPOLOGIES, "nrt-node-3")
    assert obj["attributes"][0] == {"name": "TopologyPolicy", "value": "topology-aware"}
    assert len(obj["attributes"]) == 3
    assert len(obj["zones"]) == 7 + 4
    managers = {m["manager"] for m in obj["metadata"]["managedFields"]}
    assert "nri-resmgr" in managers


class CountingClient:
    """The client, with the calls the exporter makes recorded."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client
        self.calls: list[str] = []

    async def patch(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("patch")
        return await self._client.patch(*args, **kwargs)
