"""The publisher's watch on its own slices (fake API server with a watch, virtual time).

A change made by someone else (kubelet wiping the node's slices, an edit) is repaired at
once, long before the periodic resync; the events of the publisher's own writes are not
mistaken for such changes; a watch that fails is logged and opened again.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import trio

from nri_resmgr.backoff import Backoff
from nri_resmgr.dra.kubeletplugin.devices import Device
from nri_resmgr.dra.kubeletplugin.publisher import WATCH_RETRY, SlicePublisher
from nri_resmgr.kube import Unavailable
from nri_resmgr.kube.watch import EventType
from tests.dra.watched_kube import WatchedKube

DRIVER = "template.nri.io"
NODE = "node-1"
SELECTOR = f"spec.nodeName={NODE},spec.driver={DRIVER}"
RESYNC = 3600.0
# Well inside RESYNC: a repair seen within this window came from the watch.
WATCH_WINDOW = 10.0

Start = Callable[..., Any]


@pytest.fixture
async def start() -> AsyncIterator[Start]:
    async with trio.open_nursery() as nursery:

        async def start(kube: WatchedKube, devices: list[Device] | None = None) -> SlicePublisher:
            async def current() -> list[Device]:
                return list(devices or [])

            publisher = SlicePublisher(
                kube, current, DRIVER, NODE, resync_interval=RESYNC, sync_timeout=5.0,
                backoff=Backoff(initial=0.5, maximum=8.0, jitter=0.0),
            )  # fmt: skip
            await nursery.start(publisher.run)
            return publisher

        yield start
        nursery.cancel_scope.cancel()


async def within(seconds: float, condition: Callable[[], bool]) -> None:
    with trio.fail_after(seconds):  # virtual seconds (autojump_clock)
        while not condition():
            await trio.sleep(0.1)


async def settled(kube: WatchedKube, publisher: SlicePublisher, syncs: int) -> None:
    """``syncs`` syncs done, a watch open and every event on it handled."""

    def done() -> bool:
        return publisher.syncs >= syncs and bool(kube.watches) and kube.current_watch.handled_all

    await within(WATCH_WINDOW, done)


async def test_the_watch_is_on_its_own_slices(start: Start, autojump_clock: trio.abc.Clock) -> None:
    kube = WatchedKube({NODE: "uid-1"})
    publisher = await start(kube)
    await settled(kube, publisher, 1)
    [watch] = kube.watches
    assert (watch.resource.plural, watch.resource.version) == ("resourceslices", "v1")
    assert watch.resource.group == "resource.k8s.io"
    assert watch.field_selector == SELECTOR


async def test_its_own_writes_do_not_wake_it(start: Start, autojump_clock: trio.abc.Clock) -> None:
    kube = WatchedKube({NODE: "uid-1"})
    devices: list[Device] = []
    publisher = await start(kube, devices)
    # The first RESET asks for one sync (a relist may hide changes); the create's ADDED does not.
    await settled(kube, publisher, 2)
    assert publisher.watch_events == 1

    for i in range(3):  # each change is a replace, whose MODIFIED event is ours
        devices.append(Device(f"cpu{i}", {"numa": 0}))
        publisher.trigger()
        await within(WATCH_WINDOW, lambda n=i + 1: len(slice_devices(kube)) == n)
        await settled(kube, publisher, publisher.syncs)
    assert kube.current_watch.kinds.count(EventType.MODIFIED) == 3
    assert publisher.watch_events == 1


def slice_devices(kube: WatchedKube) -> list[Any]:
    [obj] = kube.by_driver(DRIVER)
    return list(obj["spec"]["devices"])


async def test_a_wipe_is_repaired_by_the_watch(
    start: Start, autojump_clock: trio.abc.Clock
) -> None:
    kube = WatchedKube({NODE: "uid-1"})
    publisher = await start(kube)
    await settled(kube, publisher, 2)
    [before] = kube.by_driver(DRIVER)

    kube.wipe(DRIVER)
    await within(WATCH_WINDOW, lambda: len(kube.by_driver(DRIVER)) == 1)
    [after] = kube.by_driver(DRIVER)
    assert after["metadata"]["name"] != before["metadata"]["name"]
    await settled(kube, publisher, 3)
    assert publisher.watch_events == 2  # the RESET and the DELETED


async def test_an_edit_behind_its_back_is_repaired_by_the_watch(
    start: Start, autojump_clock: trio.abc.Clock
) -> None:
    kube = WatchedKube({NODE: "uid-1"})
    publisher = await start(kube)
    await settled(kube, publisher, 2)
    [obj] = kube.by_driver(DRIVER)

    kube.edit_behind_our_back(obj["metadata"]["name"], devices=[{"name": "intruder"}])
    await within(WATCH_WINDOW, lambda: slice_devices(kube) == [])
    await settled(kube, publisher, 3)
    assert publisher.watch_events == 2  # the RESET and the foreign MODIFIED


async def test_many_own_writes_are_remembered(start: Start, autojump_clock: trio.abc.Clock) -> None:
    # Only the last OWN_VERSIONS_KEPT versions are kept, the newest ones: the event of the
    # latest write must still be recognised after many writes.
    kube = WatchedKube({NODE: "uid-1"})
    devices: list[Device] = []
    publisher = await start(kube, devices)
    await settled(kube, publisher, 2)
    for i in range(70):
        devices.append(Device(f"cpu{i}", {"numa": 0}))
        publisher.trigger()
        await within(WATCH_WINDOW, lambda n=i + 1: len(slice_devices(kube)) == n)
        await settled(kube, publisher, publisher.syncs)
    assert publisher.watch_events == 1


async def test_a_failing_watch_is_logged_and_opened_again(
    start: Start, autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="nri_resmgr.dra.kubeletplugin.publisher")
    kube = WatchedKube({NODE: "uid-1"})
    kube.watch_errors = [Unavailable(503, "ServiceUnavailable", "apiserver is starting")]
    began = trio.current_time()
    publisher = await start(kube)
    await within(WATCH_WINDOW, lambda: bool(kube.watches))
    assert kube.current_watch.opened_at - began == WATCH_RETRY
    assert [r.getMessage() for r in caplog.records] == [
        "watching own ResourceSlices failed, retrying: Unavailable: 503 ServiceUnavailable: "
        "apiserver is starting"
    ]

    # The reopened watch works: a wipe is repaired through it.
    await settled(kube, publisher, 1)
    kube.wipe(DRIVER)
    await within(WATCH_WINDOW, lambda: len(kube.by_driver(DRIVER)) == 1)


async def test_the_watch_follows_the_served_api_version(
    start: Start, autojump_clock: trio.abc.Clock
) -> None:
    kube = WatchedKube({NODE: "uid-1"}, served=("v1beta1",))
    publisher = await start(kube)
    await settled(kube, publisher, 1)
    assert kube.current_watch.resource.version == "v1beta1"
    kube.wipe(DRIVER)
    await within(WATCH_WINDOW, lambda: len(kube.by_driver(DRIVER)) == 1)


# -- fleet scale: what it sends when nothing changes --------------------------------------


async def test_with_a_watch_it_never_lists_and_an_idle_hour_sends_nothing(
    autojump_clock: trio.abc.Clock, nursery: trio.Nursery
) -> None:
    kube = WatchedKube({NODE: "uid-1"})

    async def none() -> list[Device]:
        return []

    publisher = SlicePublisher(kube, none, DRIVER, NODE, sync_timeout=5.0)  # no resync interval
    await nursery.start(publisher.run)
    await settled(kube, publisher, 2)  # the first sync, and the one the watch's state asked for
    assert kube.calls == ["get", "create", "get"]  # no list: the watch told what exists
    calls = len(kube.calls)
    await trio.sleep(3600)
    assert len(kube.calls) == calls


async def test_a_sync_with_nothing_to_change_sends_nothing_when_the_node_is_followed(
    autojump_clock: trio.abc.Clock, nursery: trio.Nursery
) -> None:
    kube = WatchedKube({NODE: "uid-1"})
    node = {"metadata": {"name": NODE, "uid": "uid-1"}}

    async def none() -> list[Device]:
        return []

    publisher = SlicePublisher(kube, none, DRIVER, NODE, sync_timeout=5.0, node=lambda: node)
    await nursery.start(publisher.run)
    await settled(kube, publisher, 2)
    assert kube.calls == ["create"]  # the Node's UID came from the daemon's own watch
    publisher.trigger()  # devices may have changed: they did not
    await settled(kube, publisher, 3)
    assert kube.calls == ["create"]

    node = {"metadata": {"name": NODE, "uid": "uid-2"}}  # the Node was re-created
    kube.nodes[NODE] = "uid-2"
    publisher.trigger()
    await settled(kube, publisher, 4)
    assert kube.calls == ["create", "replace"]
    [obj] = kube.by_driver(DRIVER)
    assert obj["metadata"]["ownerReferences"][0]["uid"] == "uid-2"
