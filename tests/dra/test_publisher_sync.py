"""The publisher's sync in detail (in-process fake API server, virtual time): what one pass
writes and deletes, the retry schedule of failures, the defaults, and the log lines an
operator reads."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import trio

from nri_resmgr.backoff import Backoff
from nri_resmgr.dra.kubeletplugin.devices import Device
from nri_resmgr.dra.kubeletplugin.publisher import SlicePublisher, describe, resource_slices
from nri_resmgr.kube import ApiResource, KubeObject, NotFound
from nri_resmgr.kube.resources import RESOURCE_SLICES, RESOURCE_SLICES_V1BETA1
from tests.dra.fake_kube import HANG, FakeKube, server_error

DRIVER = "template.nri.io"
NODE = "node-1"
UID = "uid-1"
TIMEOUT = 5.0

Start = Callable[..., Any]


class RecordingKube(FakeKube):
    """Records when each call started and what deletes asked for."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.times: list[tuple[str, float]] = []
        self.deletes: list[tuple[str, str | None]] = []

    async def _enter(self, method: str, resource: ApiResource) -> None:
        self.times.append((method, trio.current_time()))
        await super()._enter(method, resource)

    async def delete(
        self, resource: ApiResource, name: str, namespace: str | None = None, *,
        resource_version: str | None = None, propagation_policy: str | None = None,
    ) -> KubeObject:  # fmt: skip
        self.deletes.append((name, resource_version))
        return await super().delete(resource, name, namespace, resource_version=resource_version)


@pytest.fixture
async def start() -> AsyncIterator[Start]:
    async with trio.open_nursery() as nursery:

        async def start(kube: FakeKube, **options: Any) -> SlicePublisher:
            devices: list[Device] = options.pop("devices", [])

            async def current() -> list[Device]:
                return list(devices)

            options.setdefault("backoff", Backoff(initial=0.5, maximum=2.0, jitter=0.0))
            publisher = SlicePublisher(
                kube, current, DRIVER, NODE, resync_interval=30.0, sync_timeout=TIMEOUT, **options
            )
            await nursery.start(publisher.run)
            return publisher

        yield start
        nursery.cancel_scope.cancel()


async def eventually(condition: Callable[[], bool]) -> None:
    with trio.fail_after(3600):  # virtual seconds
        while not condition():
            await trio.sleep(0.25)


def slice_obj(name: str, pool: str, generation: int, rv: str | None = "1") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": f"u-{name}", "generation": 1}
    if rv is not None:
        meta["resourceVersion"] = rv
    return {
        "metadata": meta,
        "spec": {
            "driver": DRIVER,
            "nodeName": NODE,
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": 1},
            "devices": [],
        },
    }


# -- defaults and counters ----------------------------------------------------------------


async def no_devices() -> list[Device]:
    return []


def test_a_new_publisher_has_counted_nothing_retries_from_one_second_and_never_relists() -> None:
    p = SlicePublisher(FakeKube({}), no_devices, DRIVER, NODE)
    assert (p.syncs, p.failures, p.watch_events, p.last_error) == (0, 0, 0, None)
    assert p.pool_name == NODE
    assert p.api_version == "v1"
    assert (p.backoff.initial, p.backoff.maximum) == (1.0, 60.0)
    # No periodic resync: the watch (tests/dra/test_publisher_watch.py) keeps it in step.
    assert (p.resync_interval, p.sync_timeout) == (None, 20.0)


def test_an_empty_node_name_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"^ResourceSlice publisher: node_name must not be empty$"):
        SlicePublisher(FakeKube({}), no_devices, DRIVER, "")


def test_the_slices_are_the_cluster_scoped_resource_the_client_knows() -> None:
    # The client builds URLs from these fields: a namespaced resource would get a wrong one.
    assert resource_slices("v1") == RESOURCE_SLICES
    assert resource_slices("v1beta1") == RESOURCE_SLICES_V1BETA1


def test_describe_names_the_error_type_and_a_timeout_in_words() -> None:
    assert describe(ValueError("bad")) == "ValueError: bad"
    assert describe(ValueError()) == "ValueError"
    assert describe(trio.TooSlowError()) == "API server did not answer in time"


async def test_a_pool_name_of_its_own(start: Start, autojump_clock: trio.abc.Clock) -> None:
    kube = FakeKube({NODE: UID})
    p = await start(kube, pool_name="pool-a")
    await eventually(lambda: p.syncs >= 1)
    [obj] = kube.by_driver(DRIVER)
    assert obj["spec"]["pool"]["name"] == "pool-a"
    assert obj["spec"]["nodeName"] == NODE


# -- failures: recoverable, retried on the backoff schedule, counted ----------------------


async def test_failures_are_retried_on_the_backoff_schedule(
    start: Start, autojump_clock: trio.abc.Clock
) -> None:
    kube = RecordingKube({NODE: UID})
    kube.fail("get", server_error(), server_error(), server_error(), server_error())
    began = trio.current_time()
    p = await start(kube)
    await eventually(lambda: p.syncs == 1)
    gets = [t - began for method, t in kube.times if method == "get"]
    # Delays 0.5, 1, 2, then 2 (the maximum): attempts at 0, 0.5, 1.5, 3.5, 5.5.
    assert gets == [0.0, 0.5, 1.5, 3.5, 5.5]
    assert (p.failures, p.last_error) == (4, None)

    # A success resets the backoff: the next failure waits the initial delay again.
    kube.fail("get", server_error())
    p.trigger()
    await eventually(lambda: p.syncs == 2)
    *_, failed, retried = [t for method, t in kube.times if method == "get"]
    assert retried - failed == 0.5
    assert p.failures == 5


async def test_a_hanging_call_is_cut_after_the_sync_timeout(
    start: Start, autojump_clock: trio.abc.Clock
) -> None:
    kube = RecordingKube({NODE: UID})
    kube.fail("list", HANG)
    began = trio.current_time()
    p = await start(kube)
    await eventually(lambda: p.failures == 1)
    assert p.last_error == "API server did not answer in time"
    await eventually(lambda: p.syncs == 1)
    lists = [t - began for method, t in kube.times if method == "list"]
    assert lists == [0.0, TIMEOUT + 0.5]
    assert p.last_error is None


async def test_a_node_without_uid_is_a_recoverable_error(
    start: Start, autojump_clock: trio.abc.Clock
) -> None:
    kube = FakeKube({NODE: ""})
    p = await start(kube)
    await eventually(lambda: p.failures >= 1)
    assert p.last_error == f"Recoverable: Node {NODE} has no metadata.uid"
    assert kube.slices == {}
    kube.nodes[NODE] = UID
    await eventually(lambda: p.syncs >= 1)
    [obj] = kube.by_driver(DRIVER)
    assert obj["metadata"]["ownerReferences"][0]["uid"] == UID


async def test_no_served_version_names_them_all_and_starts_over(
    start: Start, autojump_clock: trio.abc.Clock
) -> None:
    kube = FakeKube({NODE: UID}, served=())
    p = await start(kube)
    await eventually(lambda: p.failures >= 2)
    assert p.last_error == (
        "Recoverable: API server serves no ResourceSlice version of v1, v1beta2, v1beta1 "
        "(is DRA enabled on the cluster?)"
    )
    assert p.api_version == "v1"
    kube.served = {"v1beta2"}
    await eventually(lambda: p.syncs >= 1)
    assert p.api_version == "v1beta2"
    [obj] = kube.by_driver(DRIVER)
    assert obj["apiVersion"] == "resource.k8s.io/v1beta2"


# -- what a pass writes and deletes -------------------------------------------------------


async def test_extra_slices_are_deleted_with_their_resource_version_as_precondition(
    start: Start, autojump_clock: trio.abc.Clock
) -> None:
    kube = RecordingKube({NODE: UID})
    kube.slices = {
        "other-pool": slice_obj("other-pool", "old-pool", 9, rv="17"),
        "no-version": slice_obj("no-version", "older-pool", 2, rv=None),
    }
    p = await start(kube)
    await eventually(lambda: p.syncs >= 1)
    assert sorted(kube.deletes) == [("no-version", None), ("other-pool", "17")]
    [obj] = kube.by_driver(DRIVER)
    # The pool is new, its generation continues from the slices it replaces.
    assert obj["spec"]["pool"] == {"name": NODE, "generation": 10, "resourceSliceCount": 1}


async def test_a_slice_already_gone_is_not_a_failure(
    start: Start, autojump_clock: trio.abc.Clock
) -> None:
    kube = FakeKube({NODE: UID})
    kube.slices = {"other-pool": slice_obj("other-pool", "old-pool", 1)}
    kube.fail("delete", NotFound(404, "NotFound", "gone"))
    p = await start(kube)
    await eventually(lambda: p.syncs >= 1)
    assert p.failures == 0


class WipedBeforeReplace(FakeKube):
    """Kubelet wipes the node's slices between the publisher's list and its replace."""

    async def replace(self, resource: ApiResource, obj: KubeObject, *args: Any, **kw: Any) -> Any:
        self.slices.clear()
        return await super().replace(resource, obj, *args, **kw)


async def test_a_slice_deleted_before_its_replace_is_created_again(
    start: Start, autojump_clock: trio.abc.Clock
) -> None:
    kube = WipedBeforeReplace({NODE: UID})
    kube.slices = {"ours": slice_obj("ours", NODE, 4)}
    p = await start(kube)
    await eventually(lambda: p.syncs >= 1)
    assert p.failures == 0
    assert kube.calls[-2:] == ["replace", "create"]
    [obj] = kube.by_driver(DRIVER)
    assert obj["spec"]["pool"]["generation"] == 5


async def test_the_log_says_what_was_written_and_why_it_retries(
    start: Start, autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="nri_resmgr.dra.kubeletplugin.publisher")
    kube = FakeKube({NODE: UID}, served=("v1beta2",))
    kube.slices = {
        "ours": slice_obj("ours", NODE, 2),
        "stale": slice_obj("stale", "stale-pool", 1),
    }
    kube.fail("get", server_error())
    devices = [Device(f"cpu{i}", {"cpuID": i}) for i in range(130)]
    p = await start(kube, devices=devices)
    await eventually(lambda: p.syncs >= 1)
    [created] = [name for name in kube.slices if name not in ("ours", "stale")]
    assert [r.getMessage() for r in caplog.records] == [
        f"publishing ResourceSlice for {DRIVER} failed (attempt 1), retrying in 0.5s: "
        "Unavailable: 500 InternalError: etcd is on fire",
        "ResourceSlice API resource.k8s.io/v1 not served, trying v1beta2",
        "deleted extra ResourceSlice stale",
        "updated ResourceSlice ours (generation 3, slice 1 of 2)",
        f"created ResourceSlice {created} (generation 3, slice 2 of 2)",
    ]
    assert [r.levelno for r in caplog.records] == [logging.WARNING] + [logging.INFO] * 4


async def test_a_v1beta1_pool_is_compared_in_its_own_format_and_left_alone(
    start: Start, autojump_clock: trio.abc.Clock
) -> None:
    # v1beta1 nests attributes under "basic": compared as v1, the pool would never match and
    # would be rewritten on every sync.
    kube = FakeKube({NODE: UID}, served=("v1beta1",))
    p = await start(kube, devices=[Device("cpu0", {"numa": 0})])
    await eventually(lambda: p.syncs >= 1)
    writes = [c for c in kube.calls if c in ("create", "replace", "delete")]
    assert writes == ["create"]
    p.trigger()
    await eventually(lambda: p.syncs >= 2)
    assert [c for c in kube.calls if c in ("create", "replace", "delete")] == writes
