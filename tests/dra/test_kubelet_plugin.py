"""The kubelet plugin against grpcio acting as kubelet: registration, both DRA API versions,
per-claim errors, start/stop rules."""

from __future__ import annotations

import logging
import socket as socketlib
from pathlib import Path

import grpc
import pytest
import trio

from nri_resmgr.dra.cpu import driver_name_for
from tests.dra.conftest import (
    DRIVER,
    NODE,
    RunningPlugin,
    make_plugin,
    uid,
    wait_until,
)
from tests.dra.fake_driver import FakeDriver
from tests.dra.kubelet_client import Kubelet

VERSIONS = ("v1", "v1beta1")


async def test_get_info_advertises_driver_endpoint_and_both_versions(
    running_plugin: RunningPlugin, kubelet: Kubelet
) -> None:
    info = await kubelet.get_info(running_plugin.reg_socket)

    assert info.type == "DRAPlugin"
    assert info.name == DRIVER
    assert info.endpoint == str(running_plugin.dra_socket)
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    assert running_plugin.reg_socket.name == f"{DRIVER}-reg.sock"
    assert running_plugin.dra_socket.parent.name == DRIVER


async def test_successful_registration_is_recorded(
    running_plugin: RunningPlugin, kubelet: Kubelet
) -> None:
    await kubelet.notify(running_plugin.reg_socket, registered=True)

    status = running_plugin.plugin.registrar.status
    assert status is not None and status.registered
    assert not running_plugin.plugin.registrar.failed.is_set()


async def test_failed_registration_is_reported_not_swallowed(
    running_plugin: RunningPlugin, kubelet: Kubelet, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR), pytest.raises(grpc.RpcError) as err:
        await kubelet.notify(running_plugin.reg_socket, registered=False, error="bad versions")

    assert "failed registration process: bad versions" in err.value.details()
    registrar = running_plugin.plugin.registrar
    assert registrar.failed.is_set()
    assert registrar.status is not None and registrar.status.error == "bad versions"
    assert any("bad versions" in r.getMessage() for r in caplog.records)
    # Not fatal: the plugin keeps serving, kubelet may retry.
    info = await kubelet.get_info(running_plugin.reg_socket)
    assert info.name == DRIVER


@pytest.mark.parametrize("version", VERSIONS)
async def test_prepare_and_unprepare_on_the_advertised_endpoint(
    running_plugin: RunningPlugin, kubelet: Kubelet, version: str
) -> None:
    info = await kubelet.get_info(running_plugin.reg_socket)
    await kubelet.notify(running_plugin.reg_socket, registered=True)
    channel = kubelet.channel(info.endpoint)

    a, b, never = uid("a"), uid("b"), uid("never-prepared")
    prepared = await kubelet.prepare(version, channel, a, b)
    assert set(prepared.claims) == {a, b}
    for key, answer in prepared.claims.items():
        assert answer.error == ""
        [device] = answer.devices
        assert (device.pool_name, device.device_name) == (NODE, "dev0")
        assert list(device.request_names) == ["cpus"]
        # The driver's CDI id, then the layer's device metadata mount (KEP-5304).
        assert list(device.cdi_device_ids) == [
            f"fake.nri.io/dev=claim-{key}",
            f"{DRIVER}/metadata={key}_cpus",
        ]

    unprepared = await kubelet.unprepare(version, channel, a, b, never)
    assert set(unprepared.claims) == {a, b, never}
    assert all(a.error == "" for a in unprepared.claims.values())
    assert running_plugin.driver.unprepared == [[a, b, never]]


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_claim_that_cannot_be_answered_gets_its_own_error(
    aio_loop: object, socket_dir: Path, kubelet: Kubelet, version: str
) -> None:
    driver = FakeDriver()
    good, bad, forgotten, malformed = uid("good"), uid("bad"), uid("forgotten"), "not-a-uid"
    driver.errors[bad] = "no such CPUs"
    driver.forget.add(forgotten)
    plugin = make_plugin(socket_dir, driver)
    async with trio.open_nursery() as nursery:
        await plugin.start(nursery)
        channel = kubelet.channel(plugin.dra_socket)

        reply = await kubelet.prepare(version, channel, good, bad, forgotten, malformed, "")

        assert reply.claims[good].error == ""
        [device] = reply.claims[good].devices
        assert (device.pool_name, device.device_name) == (NODE, "dev0")
        assert reply.claims[bad].error == "no such CPUs"
        assert f"no prepare answer for claim default/claim-{forgotten}" in (
            reply.claims[forgotten].error
        )
        assert "UID 'not-a-uid' is not a Kubernetes UID" in reply.claims[malformed].error
        assert "has no UID" in reply.claims[""].error
        # Only the well-formed claims reached the driver.
        assert driver.prepared == [[good, bad, forgotten]]
        await plugin.stop()


async def test_the_driver_is_asked_one_request_at_a_time(
    running_plugin: RunningPlugin, kubelet: Kubelet
) -> None:
    channel = kubelet.channel(running_plugin.dra_socket)
    driver = running_plugin.driver
    driver.hold = trio.Event()
    replies = []

    async def prepare(label: str) -> None:
        replies.append(await kubelet.prepare("v1", channel, uid(label)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(prepare, "one")
        nursery.start_soon(prepare, "two")
        await wait_until(lambda: running_plugin.plugin._dra.gate.in_flight == 2)
        await wait_until(lambda: driver.running == 1)
        await trio.sleep(0.05)
        assert replies == [] and driver.running == 1
        driver.hold.set()
    assert driver.most_running == 1
    assert [r.claims[k].error for r in replies for k in r.claims] == ["", ""]


async def test_second_start_is_refused(running_plugin: RunningPlugin) -> None:
    with pytest.raises(RuntimeError, match="already started"):
        await running_plugin.plugin.start(running_plugin.nursery)


async def test_stop_is_idempotent_and_removes_both_sockets(
    running_plugin: RunningPlugin,
) -> None:
    assert running_plugin.reg_socket.exists() and running_plugin.dra_socket.exists()
    await running_plugin.plugin.stop()
    await running_plugin.plugin.stop()
    assert not running_plugin.reg_socket.exists()
    assert not running_plugin.dra_socket.exists()


async def test_stale_socket_files_are_replaced(
    aio_loop: object, socket_dir: Path, kubelet: Kubelet
) -> None:
    first = make_plugin(socket_dir)
    async with trio.open_nursery() as nursery:
        await first.start(nursery)
        # Simulate a crash: forget the plugin without stopping, leaving the files behind.
        nursery.cancel_scope.cancel()
    (socket_dir / "plugins" / DRIVER).mkdir(parents=True, exist_ok=True)
    for path in (first.dra_socket, first.registration_socket):
        s = socketlib.socket(socketlib.AF_UNIX)
        s.bind(str(path))
        s.close()
    second = make_plugin(socket_dir)
    async with trio.open_nursery() as nursery:
        await second.start(nursery)
        info = await kubelet.get_info(second.registration_socket)
        assert info.name == DRIVER
        await second.stop()


def test_driver_name_is_policy_dot_nri_io() -> None:
    assert driver_name_for("topology-aware") == "topology-aware.nri.io"


async def test_a_client_that_gives_up_abandons_its_wait_for_the_driver(
    running_plugin: RunningPlugin, kubelet: Kubelet, caplog: pytest.LogCaptureFixture
) -> None:
    plugin, driver = running_plugin.plugin, running_plugin.driver
    pb2 = kubelet.stubs.dra["v1"].pb2
    stub = kubelet.dra_stub("v1", kubelet.channel(plugin.dra_socket))
    request = pb2.NodePrepareResourcesRequest(claims=kubelet.claims("v1", uid("slow")))

    driver.hold = trio.Event()  # stands in for the manager lock held by an NRI request
    with pytest.raises(grpc.RpcError) as err:
        await trio.to_thread.run_sync(lambda: stub.NodePrepareResources(request, timeout=0.3))
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    # The handler stopped waiting for the driver, and the driver's call was cancelled: no
    # pile-up of abandoned requests. (The gate lets go when the asyncio handler ends; the
    # cancelled trio task unwinds a moment later, so both are waited for.)
    await wait_until(lambda: plugin._dra.gate.in_flight == 0 and driver.running == 0)
    assert "Failed to handle cancellation" not in caplog.text


def _accepts(path: Path) -> bool:
    """True when something listens on the unix socket ``path`` (the backlog takes the connect)."""
    with socketlib.socket(socketlib.AF_UNIX) as s:
        try:
            s.connect(str(path))
        except OSError:
            return False
        return True


async def test_the_dra_socket_listens_before_the_registration_socket_appears(
    aio_loop: object, socket_dir: Path
) -> None:
    # kubelet dials the advertised DRA endpoint as soon as it sees the registration socket,
    # so what each server sees when it starts is recorded; swapped starts change both rows.
    plugin = make_plugin(socket_dir)
    seen: dict[str, tuple[bool, bool]] = {}

    def observe(name: str, server: object) -> None:
        inner = server.serve  # type: ignore[attr-defined]

        async def serve(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            seen[name] = (_accepts(plugin.dra_socket), plugin.registration_socket.exists())
            await inner(task_status=task_status)

        server.serve = serve  # type: ignore[attr-defined]

    observe("dra", plugin._dra)
    observe("registration", plugin._registration)
    async with trio.open_nursery() as nursery:
        await plugin.start(nursery)
        await plugin.stop()
    assert seen == {"dra": (False, False), "registration": (True, False)}
