"""The ResourceSlice publisher against the in-process fake API server (virtual time)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import attrs
import pytest
import trio

from nri_resmgr.backoff import Backoff
from nri_resmgr.dra.kubeletplugin.devices import Device
from nri_resmgr.dra.kubeletplugin.publisher import SlicePublisher
from tests.dra.fake_kube import HANG, FakeKube, conflict, server_error

DRIVER = "template.nri.io"
NODE = "node-1"
NODE_UID = "node-uid-1"


@attrs.define
class Setup:
    kube: FakeKube
    publisher: SlicePublisher
    devices: list[Device]


async def eventually(condition: Callable[[], bool]) -> None:
    # Virtual time (autojump_clock): the limit is in fake seconds and costs nothing.
    with trio.fail_after(3600):
        while not condition():
            await trio.sleep(0.5)


def make_setup(kube: FakeKube) -> Setup:
    devices: list[Device] = []

    async def current_devices() -> list[Device]:
        return list(devices)

    publisher = SlicePublisher(
        kube, current_devices, DRIVER, NODE,
        resync_interval=30.0, sync_timeout=5.0, backoff=Backoff(initial=0.5, maximum=8.0),
    )  # fmt: skip
    return Setup(kube, publisher, devices)


# Every async test takes ``autojump_clock`` (pytest-trio only honours a clock passed to the
# test itself): backoffs, timeouts and resyncs then pass in virtual time, instantly.
@pytest.fixture
async def running() -> AsyncIterator[Callable[[FakeKube], Any]]:
    async with trio.open_nursery() as nursery:

        async def start(kube: FakeKube) -> Setup:
            setup = make_setup(kube)
            await nursery.start(setup.publisher.run)
            return setup

        yield start
        nursery.cancel_scope.cancel()


def only_slice(kube: FakeKube) -> dict[str, Any]:
    [obj] = kube.by_driver(DRIVER)
    return obj


async def test_publishes_one_empty_slice_owned_by_the_node(
    running: Any, autojump_clock: trio.abc.Clock
) -> None:
    s: Setup = await running(FakeKube({NODE: NODE_UID}))
    await eventually(lambda: s.publisher.syncs >= 1)

    obj = only_slice(s.kube)
    assert obj["metadata"]["generateName"] == f"{NODE}-{DRIVER}-"
    assert obj["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": NODE_UID, "controller": True}
    ]
    assert obj["spec"] == {
        "driver": DRIVER,
        "nodeName": NODE,
        "pool": {"name": NODE, "generation": 0, "resourceSliceCount": 1},
        "devices": [],
    }
    assert obj["apiVersion"] == "resource.k8s.io/v1"


def slice_obj(name: str, driver: str, pool: str, generation: int, rv: str = "1") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": f"u-{name}", "resourceVersion": rv, "generation": 1},
        "spec": {
            "driver": driver,
            "nodeName": NODE,
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": 1},
            "devices": [],
        },
    }


async def test_adopts_newest_own_slice_and_deletes_the_rest(
    running: Any, autojump_clock: trio.abc.Clock
) -> None:
    kube = FakeKube({NODE: NODE_UID})
    kube.slices = {
        "old": slice_obj("old", DRIVER, NODE, 2),
        "newest": slice_obj("newest", DRIVER, NODE, 3),
        "other-pool": slice_obj("other-pool", DRIVER, "stale-pool", 9),
        "foreign": slice_obj("foreign", "gpu.example.com", NODE, 1),
    }
    s: Setup = await running(kube)
    await eventually(lambda: s.publisher.syncs >= 1)

    assert set(kube.slices) == {"newest", "foreign"}
    kept = kube.slices["newest"]
    # It lacked our owner reference: rewritten, with the pool generation bumped.
    assert kept["spec"]["pool"]["generation"] == 4
    assert kept["metadata"]["ownerReferences"][0]["uid"] == NODE_UID


async def test_restores_a_slice_edited_or_deleted_behind_its_back(
    running: Any, autojump_clock: trio.abc.Clock
) -> None:
    s: Setup = await running(FakeKube({NODE: NODE_UID}))
    await eventually(lambda: s.publisher.syncs >= 1)
    name = only_slice(s.kube)["metadata"]["name"]

    s.kube.edit_behind_our_back(name, devices=[{"name": "intruder"}])
    s.publisher.trigger()
    await eventually(lambda: only_slice(s.kube)["spec"]["devices"] == [])
    assert only_slice(s.kube)["spec"]["pool"]["generation"] == 1

    del s.kube.slices[name]  # as kubelet does when it starts: no trigger, the resync finds it
    await eventually(lambda: len(s.kube.by_driver(DRIVER)) == 1)
    assert only_slice(s.kube)["metadata"]["name"] != name


async def test_device_changes_are_published_with_a_new_generation(
    running: Any, autojump_clock: trio.abc.Clock
) -> None:
    s: Setup = await running(FakeKube({NODE: NODE_UID}))
    await eventually(lambda: s.publisher.syncs >= 1)

    s.devices.append(Device("cpu-0", {"numa": 0, "isolated": True, "model": "x"}))
    s.publisher.trigger()
    await eventually(lambda: only_slice(s.kube)["spec"]["devices"] != [])

    spec = only_slice(s.kube)["spec"]
    assert spec["devices"] == [
        {
            "name": "cpu-0",
            "attributes": {
                "numa": {"int": 0},
                "isolated": {"bool": True},
                "model": {"string": "x"},
            },
        }
    ]
    assert spec["pool"]["generation"] == 1


async def test_api_failures_are_retried_until_the_server_is_healthy(
    running: Any, autojump_clock: trio.abc.Clock
) -> None:
    kube = FakeKube({NODE: NODE_UID})
    kube.fail("get", server_error())
    kube.fail("list", HANG, server_error())
    kube.fail("create", conflict(), server_error(), HANG)
    s: Setup = await running(kube)

    await eventually(lambda: s.publisher.syncs >= 1)

    assert s.publisher.failures == 6
    assert kube.faults == []
    assert len(kube.by_driver(DRIVER)) == 1
    # Once healthy, a later failure is retried again from a reset backoff.
    kube.fail("list", server_error())
    s.publisher.trigger()
    await eventually(lambda: s.publisher.syncs >= 2)
    assert s.publisher.failures == 7


async def test_a_missing_node_is_retried_not_fatal(
    running: Any, autojump_clock: trio.abc.Clock
) -> None:
    kube = FakeKube({})
    s: Setup = await running(kube)
    await eventually(lambda: s.publisher.failures >= 3)
    assert "NotFound" in (s.publisher.last_error or "")

    kube.nodes[NODE] = NODE_UID
    await eventually(lambda: s.publisher.syncs >= 1)
    assert len(kube.by_driver(DRIVER)) == 1


async def test_falls_back_to_v1beta1_with_nested_device_attributes(
    running: Any, autojump_clock: trio.abc.Clock
) -> None:
    s: Setup = await running(FakeKube({NODE: NODE_UID}, served=("v1beta1",)))
    s.devices.append(Device("cpu-0", {"numa": 1}))
    s.publisher.trigger()
    await eventually(
        lambda: bool(s.kube.by_driver(DRIVER)) and bool(only_slice(s.kube)["spec"]["devices"])
    )

    obj = only_slice(s.kube)
    assert s.publisher.api_version == "v1beta1"
    assert obj["apiVersion"] == "resource.k8s.io/v1beta1"
    assert obj["spec"]["devices"] == [
        {"name": "cpu-0", "basic": {"attributes": {"numa": {"int": 1}}}}
    ]


async def test_no_served_version_is_a_recoverable_error(
    running: Any, autojump_clock: trio.abc.Clock
) -> None:
    s: Setup = await running(FakeKube({NODE: NODE_UID}, served=()))
    await eventually(lambda: s.publisher.failures >= 2)
    assert "serves no ResourceSlice version" in (s.publisher.last_error or "")


def test_a_node_name_is_required() -> None:
    async def no_devices() -> list[Device]:
        return []

    with pytest.raises(ValueError, match="node_name must not be empty"):
        SlicePublisher(FakeKube({}), no_devices, DRIVER, "")


async def test_a_large_pool_is_split_into_slices_of_one_generation_and_left_alone(
    running: Any, autojump_clock: trio.abc.Clock
) -> None:
    s: Setup = await running(FakeKube({NODE: NODE_UID}))
    await eventually(lambda: s.publisher.syncs >= 1)
    s.devices.extend(Device(f"cpu{i}", {"cpuID": i}) for i in range(300))
    s.publisher.trigger()
    await eventually(lambda: len(s.kube.by_driver(DRIVER)) == 3)

    slices = s.kube.by_driver(DRIVER)
    assert sorted(len(o["spec"]["devices"]) for o in slices) == [44, 128, 128]
    assert {o["spec"]["pool"]["resourceSliceCount"] for o in slices} == {3}
    assert {o["spec"]["pool"]["generation"] for o in slices} == {1}
    names = [d["name"] for o in slices for d in o["spec"]["devices"]]
    assert sorted(names) == sorted(f"cpu{i}" for i in range(300))

    # Nothing changed: later syncs write nothing.
    writes = [c for c in s.kube.calls if c in ("create", "replace", "delete")]
    syncs = s.publisher.syncs
    s.publisher.trigger()
    await eventually(lambda: s.publisher.syncs > syncs)
    assert [c for c in s.kube.calls if c in ("create", "replace", "delete")] == writes
