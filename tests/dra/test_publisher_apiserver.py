"""The ResourceSlice publisher against a real kube-apiserver + etcd (the session's servers,
v1.35.4 and v1.37.2, or the version a nox session names: ``tests/kube/versions.py``): the
server's validation accepts our slice, it is owned by the Node, and it is restored after edits
and deletes made behind our back; grouped devices are published where the server keeps
consumable capacity and refused, naming the feature, where it drops it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import attrs
import pytest
import trio

from nri_resmgr.backoff import Backoff
from nri_resmgr.dra.kubeletplugin.devices import Capacity, Device, RequestPolicy
from nri_resmgr.dra.kubeletplugin.publisher import SlicePublisher, resource_slices
from nri_resmgr.errors import Fatal
from nri_resmgr.kube import KubeClient
from nri_resmgr.kube.resources import NODES
from tests.kube.apiserver import ApiServer
from tests.kube.versions import minor

pytestmark = pytest.mark.integration

DRIVER = "template.nri.io"
SLICES = resource_slices("v1")
CONSUMABLE_CAPACITY_FROM = (1, 36)
"""DRAConsumableCapacity: alpha, off by default in 1.34-1.35; beta, on by default from 1.36."""


@attrs.define
class Published:
    kube: KubeClient
    publisher: SlicePublisher
    node: dict[str, Any]
    devices: list[Device]

    async def slices(self) -> list[dict[str, Any]]:
        name = self.node["metadata"]["name"]
        found = await self.kube.list(
            SLICES, field_selector=f"spec.nodeName={name},spec.driver={DRIVER}"
        )
        return list(found.items)


async def eventually(check: Callable[[], Any], limit: float = 30.0) -> Any:
    with trio.fail_after(limit):
        while not (result := await check()):
            await trio.sleep(0.1)
        return result


@pytest.fixture
async def published(kube_apiserver: ApiServer) -> AsyncIterator[Published]:
    async with KubeClient(kube_apiserver.config()) as kube:
        node = await kube.create(NODES, {"metadata": {"name": f"dra-{uuid.uuid4().hex[:8]}"}})
        devices: list[Device] = []

        async def current_devices() -> list[Device]:
            return list(devices)

        publisher = SlicePublisher(
            kube, current_devices, DRIVER, node["metadata"]["name"],
            resync_interval=0.5, backoff=Backoff(initial=0.1, maximum=1.0),
        )  # fmt: skip
        async with trio.open_nursery() as nursery:
            await nursery.start(publisher.run)
            yield Published(kube, publisher, node, devices)
            nursery.cancel_scope.cancel()
        await kube.delete(NODES, node["metadata"]["name"])


async def one_slice(p: Published) -> dict[str, Any] | None:
    slices = await p.slices()
    return slices[0] if len(slices) == 1 else None


async def test_the_server_accepts_the_slice_owned_by_the_node(published: Published) -> None:
    obj = await eventually(lambda: one_slice(published))
    node = published.node["metadata"]

    assert obj["spec"]["driver"] == DRIVER
    assert obj["spec"]["nodeName"] == node["name"]
    assert obj["spec"]["pool"] == {"name": node["name"], "generation": 0, "resourceSliceCount": 1}
    assert obj["spec"].get("devices", []) == []
    [owner] = obj["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Node", node["name"], node["uid"])
    # The server keeps the field as sent: the Node is the slice's managing owner.
    assert owner["controller"] is True
    assert published.publisher.api_version == "v1"


async def test_devices_pass_server_validation(published: Published) -> None:
    await eventually(lambda: one_slice(published))
    published.devices.append(Device("cpu-0", {"numa": 0, "isolated": True, "model": "x"}))
    published.publisher.trigger()

    async def with_device() -> dict[str, Any] | None:
        obj = await one_slice(published)
        return obj if obj and obj["spec"].get("devices") else None

    obj = await eventually(with_device)
    assert obj["spec"]["devices"][0]["name"] == "cpu-0"
    assert obj["spec"]["devices"][0]["attributes"]["numa"] == {"int": 0}
    assert obj["spec"]["pool"]["generation"] == 1
    assert published.publisher.last_error is None


async def test_edits_and_deletes_behind_its_back_are_reconciled(published: Published) -> None:
    obj = await eventually(lambda: one_slice(published))
    name = obj["metadata"]["name"]

    obj["spec"]["devices"] = [{"name": "intruder"}]
    await published.kube.replace(SLICES, obj)

    async def restored() -> dict[str, Any] | None:
        current = await one_slice(published)
        return current if current and not current["spec"].get("devices") else None

    current = await eventually(restored)
    assert current["metadata"]["name"] == name
    assert current["spec"]["pool"]["generation"] == 1

    await published.kube.delete(SLICES, name)

    async def recreated() -> dict[str, Any] | None:
        current = await one_slice(published)
        return current if current and current["metadata"]["name"] != name else None

    await eventually(recreated)


async def test_a_recreated_node_becomes_the_owner_by_its_new_uid(published: Published) -> None:
    # No garbage collector runs here (no controller manager), so the slice outlives the Node,
    # as it may in a cluster between a Node's deletion and the collector's pass.
    obj = await eventually(lambda: one_slice(published))
    name = published.node["metadata"]["name"]
    await published.kube.delete(NODES, name)
    new_node = await published.kube.create(NODES, {"metadata": {"name": name}})
    new_uid = new_node["metadata"]["uid"]
    assert new_uid != published.node["metadata"]["uid"]
    published.publisher.trigger()

    async def owned_by_new_node() -> dict[str, Any] | None:
        current = await one_slice(published)
        refs = (current or {}).get("metadata", {}).get("ownerReferences", [])
        return current if [r["uid"] for r in refs] == [new_uid] else None

    current = await eventually(owned_by_new_node)
    assert current["metadata"]["name"] == obj["metadata"]["name"]
    assert current["metadata"]["ownerReferences"][0]["controller"] is True
    assert current["spec"]["pool"]["generation"] == 1


def shared_group() -> Device:
    return Device(
        "numa0",
        {"numCPUs": 4},
        {"cpu": Capacity(4, RequestPolicy(minimum=1, step=1, default=1))},
        allow_multiple_allocations=True,
    )


async def test_grouped_devices_need_the_servers_consumable_capacity(
    kube_apiserver: ApiServer, kube_version: str
) -> None:
    """Before 1.36 ``DRAConsumableCapacity`` is off: the server stores a shared device
    without allowMultipleAllocations, which would hand a whole group to one claim. The
    publisher stops the daemon naming the feature instead. From 1.36 on (beta, on by
    default) the server keeps the device as sent and the publisher goes on."""

    async def devices() -> list[Device]:
        return [shared_group()]

    async with KubeClient(kube_apiserver.config()) as kube:
        node = await kube.create(NODES, {"metadata": {"name": f"dra-{uuid.uuid4().hex[:8]}"}})
        name = node["metadata"]["name"]
        publisher = SlicePublisher(kube, devices, DRIVER, name)
        if minor(kube_version) < CONSUMABLE_CAPACITY_FROM:
            # Not retried as an API failure would be: the task ends with it.
            with pytest.RaisesGroup(pytest.RaisesExc(Fatal, match="DRAConsumableCapacity")) as no:
                await publisher.run()
            assert "dra.cpuDeviceMode: grouped" in str(no.value.exceptions[0])
        else:
            async with trio.open_nursery() as nursery:
                await nursery.start(publisher.run)
                p = Published(kube, publisher, node, [])
                obj = await eventually(lambda: one_slice(p))
                nursery.cancel_scope.cancel()
            [device] = obj["spec"]["devices"]
            assert device["allowMultipleAllocations"] is True
            assert device["capacity"]["cpu"]["requestPolicy"]["validRange"]["step"] == "1"
            assert publisher.last_error is None
            await kube.delete(SLICES, obj["metadata"]["name"])
        await kube.delete(NODES, name)
