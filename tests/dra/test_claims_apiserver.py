"""CPU devices and claims against a real kube-apiserver + etcd (the session's servers, v1.35.4
and v1.37.2, or the version a nox session names: ``tests/kube/versions.py``): a pool over
several slices passes validation, a wiped slice comes back through the watch (not the re-list;
1.37's watch-list replies come gzip in many members), and Prepare reads the ResourceClaim the
server holds, UID checked."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from nri_resmgr.backoff import Backoff
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.dra.kubeletplugin.claims import ClaimRef
from nri_resmgr.dra.kubeletplugin.devices import Device
from nri_resmgr.dra.kubeletplugin.publisher import SlicePublisher, resource_slices
from nri_resmgr.kube import KubeClient
from nri_resmgr.kube.config import ClusterConfig
from nri_resmgr.kube.resources import NODES, RESOURCE_CLAIMS
from tests.dra.claim_setup import DRIVER, NODE, make_node
from tests.kube.apiserver import ApiServer, free_port

pytestmark = pytest.mark.integration

SLICES = resource_slices("v1")


@attrs.define
class Pool:
    kube: KubeClient
    publisher: SlicePublisher
    node: str
    devices: list[Device]

    async def slices(self) -> list[dict[str, Any]]:
        found = await self.kube.list(
            SLICES, field_selector=f"spec.nodeName={self.node},spec.driver={DRIVER}"
        )
        return list(found.items)


async def eventually(check: Any, limit: float = 30.0) -> Any:
    with trio.fail_after(limit):
        while not (result := await check()):
            await trio.sleep(0.05)
        return result


@contextlib.asynccontextmanager
async def open_pool(server: ApiServer) -> AsyncIterator[Pool]:
    """A node of 200 CPU devices and its running publisher, on ``server``."""
    async with KubeClient(server.config()) as kube:
        node = f"cpus-{uuid.uuid4().hex[:8]}"
        await kube.create(NODES, {"metadata": {"name": node}})
        devices = [
            Device(f"cpu{i}", {"cpuID": i, "resource.kubernetes.io/numaNode": i // 100})
            for i in range(200)
        ]

        async def current() -> list[Device]:
            return list(devices)

        # A re-list every 5 minutes: anything repaired sooner was repaired by the watch.
        publisher = SlicePublisher(
            kube, current, DRIVER, node, resync_interval=300.0,
            backoff=Backoff(initial=0.1, maximum=1.0),
        )  # fmt: skip
        async with trio.open_nursery() as nursery:
            await nursery.start(publisher.run)
            yield Pool(kube, publisher, node, devices)
            nursery.cancel_scope.cancel()
        for obj in (await kube.list(SLICES, field_selector=f"spec.nodeName={node}")).items:
            await kube.delete(SLICES, obj["metadata"]["name"])
        await kube.delete(NODES, node)


@pytest.fixture
async def pool(kube_apiserver: ApiServer) -> AsyncIterator[Pool]:
    async with open_pool(kube_apiserver) as opened:
        yield opened


def complete(slices: list[dict[str, Any]], count: int) -> bool:
    pools = [s["spec"]["pool"] for s in slices]
    return (
        len(slices) == count
        and {p["resourceSliceCount"] for p in pools} == {count}
        and len({p["generation"] for p in pools}) == 1
    )


async def test_a_pool_of_200_devices_is_two_valid_slices_of_one_generation(pool: Pool) -> None:
    async def two() -> list[dict[str, Any]] | None:
        slices = await pool.slices()
        return slices if complete(slices, 2) else None

    slices = await eventually(two)
    names = sorted(d["name"] for s in slices for d in s["spec"]["devices"])
    assert names == sorted(f"cpu{i}" for i in range(200))
    assert sorted(len(s["spec"]["devices"]) for s in slices) == [72, 128]

    del pool.devices[100:]
    pool.publisher.trigger()

    async def one() -> list[dict[str, Any]] | None:
        current = await pool.slices()
        return current if complete(current, 1) else None

    [single] = await eventually(one)
    assert len(single["spec"]["devices"]) == 100
    assert single["spec"]["pool"]["generation"] > slices[0]["spec"]["pool"]["generation"]


async def test_a_wiped_pool_is_republished_through_the_watch(pool: Pool) -> None:
    """The wipe lands after the publisher's watch got its initial state: before the client read
    every gzip member, that watch heard nothing more at 1.37 and the pool stayed gone."""

    async def two() -> list[dict[str, Any]] | None:
        slices = await pool.slices()
        return slices if complete(slices, 2) else None

    before = await eventually(two)
    syncs = pool.publisher.syncs
    for obj in before:  # what kubelet does at its start
        await pool.kube.delete(SLICES, obj["metadata"]["name"])

    after = await eventually(two)
    assert {s["metadata"]["name"] for s in after}.isdisjoint(s["metadata"]["name"] for s in before)
    assert pool.publisher.watch_events >= 1
    assert pool.publisher.syncs > syncs


async def _claim(kube: KubeClient, name: str, devices: list[str]) -> dict[str, Any]:
    claim = await kube.create(
        RESOURCE_CLAIMS,
        {
            "metadata": {"name": name},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "cpus",
                            "exactly": {
                                "deviceClassName": DRIVER,
                                "allocationMode": "ExactCount",
                                "count": len(devices),
                            },
                        }
                    ]
                }
            },
        },
        namespace="default",
    )
    claim["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "cpus", "driver": DRIVER, "pool": NODE, "device": d}
                    for d in devices
                ]
            },
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [NODE]}]}]},
        }
    }  # fmt: skip
    return await kube.replace(RESOURCE_CLAIMS, claim, namespace="default", subresource="status")


async def test_prepare_reads_the_claim_from_the_server_and_checks_its_uid(
    kube_apiserver: ApiServer, tmp_path: Path
) -> None:
    node = make_node(tmp_path)
    name = f"two-cpus-{uuid.uuid4().hex[:6]}"
    async with KubeClient(kube_apiserver.config()) as kube:
        node.preparer.kube = kube
        claim = await _claim(kube, name, ["cpu6", "cpu7"])
        uid = claim["metadata"]["uid"]

        outcomes = await node.preparer.prepare([ClaimRef(uid, "default", name)])
        assert outcomes[uid].error == ""
        assert [d.device.device for d in outcomes[uid].devices] == ["cpu6", "cpu7"]
        assert node.policy.claims.cpus() == {uid: CpuSet([6, 7])}

        # The same name, a new object: kubelet's UID is stale.
        await kube.delete(RESOURCE_CLAIMS, name, namespace="default")
        again = await _claim(kube, name, ["cpu8"])
        stale = f"{uid[:-4]}dead" if not uid.endswith("dead") else f"{uid[:-4]}beef"
        outcomes = await node.preparer.prepare([ClaimRef(stale, "default", name)])
        assert f"has UID {again['metadata']['uid']}, kubelet asked for {stale}" in (
            outcomes[stale].error
        )
        await kube.delete(RESOURCE_CLAIMS, name, namespace="default")


async def test_an_unreachable_api_server_fails_the_claim_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    node = make_node(tmp_path)
    async with KubeClient(ClusterConfig(server=f"http://127.0.0.1:{free_port()}")) as kube:
        node.preparer.kube = kube
        uid = str(uuid.uuid4())
        outcomes = await node.preparer.prepare([ClaimRef(uid, "default", "c")])
    assert "cannot read ResourceClaim default/c: " in outcomes[uid].error
    assert node.policy.claims.cpus() == {}
    assert not node.cdi_dir.exists() or not list(node.cdi_dir.iterdir())
