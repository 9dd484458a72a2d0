"""Stop ordering, draining, and fatal server failures, with grpcio as kubelet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest
import trio

from nri_resmgr.daemon import EXIT_FATAL, Daemon
from nri_resmgr.errors import Fatal
from tests.dra.conftest import RunningPlugin, make_plugin, uid, wait_until
from tests.dra.fake_driver import FakeDriver
from tests.dra.kubelet_client import Kubelet


async def test_stop_removes_sockets_and_drains_while_the_driver_is_busy(
    running_plugin: RunningPlugin, kubelet: Kubelet
) -> None:
    plugin, driver = running_plugin.plugin, running_plugin.driver
    channel = kubelet.channel(plugin.dra_socket)
    await kubelet.prepare("v1", channel, uid("warm-up"))  # an open connection, as kubelet keeps
    in_flight: list[Any] = []
    stop_done = trio.Event()

    async def request_in_flight() -> None:
        in_flight.append(await kubelet.prepare("v1", channel, uid("in-flight")))

    async def stop() -> None:
        await plugin.stop()
        stop_done.set()

    async with trio.open_nursery() as nursery:
        driver.hold = trio.Event()  # stands in for the manager lock held by an NRI request
        nursery.start_soon(request_in_flight)
        await wait_until(lambda: plugin._dra.gate.in_flight == 1)
        nursery.start_soon(stop)

        await wait_until(
            lambda: not plugin.dra_socket.exists() and not plugin.registration_socket.exists()
        )
        # Mid-drain: a new request on the open connection is refused, not queued behind it.
        with pytest.raises(grpc.RpcError) as refused:
            await kubelet.prepare("v1", channel, uid("late"))
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert not stop_done.is_set()
        assert in_flight == []
        # The driver goes on: the in-flight request completes, then stop does.
        driver.hold.set()
        with trio.fail_after(10):
            await stop_done.wait()
    assert in_flight[0].claims[uid("in-flight")].error == ""


async def test_handler_cancelled_at_shutdown_answers_unavailable(
    aio_loop: object, socket_dir: Path, kubelet: Kubelet
) -> None:
    driver = FakeDriver()
    plugin = make_plugin(socket_dir, driver, drain_timeout=0.1)
    errors: list[grpc.RpcError] = []

    async def blocked_request(channel: grpc.Channel) -> None:
        try:
            await kubelet.prepare("v1beta1", channel, uid("stuck"))
        except grpc.RpcError as e:
            errors.append(e)

    async with trio.open_nursery() as nursery:
        await plugin.start(nursery)
        channel = kubelet.channel(plugin.dra_socket)
        driver.hold = trio.Event()
        nursery.start_soon(blocked_request, channel)
        await wait_until(lambda: plugin._dra.gate.in_flight == 1)
        # The drain deadline passes with the driver still busy: the handler is cancelled.
        await plugin.stop()
        await wait_until(lambda: bool(errors), limit=20)
    # Not DEADLINE_EXCEEDED: the client was told, rather than left waiting for its deadline.
    assert errors[0].code() == grpc.StatusCode.UNAVAILABLE
    assert "shutting down" in (errors[0].details() or "")


async def serve_until_fatal(plugin: Any, sabotage: Any = None) -> Fatal:
    """Run the plugin as the daemon would, sabotage it, and return the Fatal that ends it."""
    caught: list[Fatal] = []
    try:
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                await plugin.start(nursery)
                sabotage(plugin)
    except* Fatal as group:
        caught.extend(e for e in group.exceptions if isinstance(e, Fatal))
    assert caught, "serve() returned without raising Fatal"
    return caught[0]


@pytest.mark.parametrize(
    "sabotage",
    [
        pytest.param(lambda p: p.dra_socket.unlink(), id="dra-socket-removed"),
        pytest.param(lambda p: p.registration_socket.unlink(), id="reg-socket-removed"),
        pytest.param(lambda p: p._dra._grpc.stop_accepting(), id="dra-listener-dead"),
    ],
)
async def test_a_server_that_gives_up_is_fatal_and_removes_both_sockets(
    aio_loop: object, socket_dir: Path, sabotage: Any
) -> None:
    plugin = make_plugin(socket_dir)
    fatal = await serve_until_fatal(plugin, sabotage)

    assert "DRA driver fake.nri.io" in str(fatal)
    assert not plugin.dra_socket.exists()
    assert not plugin.registration_socket.exists()


async def test_cancellation_without_stop_still_removes_sockets(
    aio_loop: object, socket_dir: Path
) -> None:
    plugin = make_plugin(socket_dir)
    async with trio.open_nursery() as nursery:
        await plugin.start(nursery)
        assert plugin.dra_socket.exists()
        nursery.cancel_scope.cancel()
    assert not plugin.dra_socket.exists()
    assert not plugin.registration_socket.exists()


async def test_a_socket_path_taken_by_a_regular_file_is_refused(
    aio_loop: object, socket_dir: Path
) -> None:
    plugin = make_plugin(socket_dir)
    plugin.plugin_dir.mkdir(parents=True)
    plugin.dra_socket.write_text("not a socket")
    fatal = await serve_until_fatal(plugin)
    assert "is not a unix socket" in str(fatal)
    assert plugin.dra_socket.read_text() == "not a socket"


async def test_a_dead_dra_server_ends_the_daemon_like_sigterm_with_a_nonzero_exit(
    aio_loop: object, socket_dir: Path
) -> None:
    plugin = make_plugin(socket_dir)
    daemon = Daemon([plugin], grace=5.0)
    exit_code: list[int] = []

    async def run_daemon() -> None:
        exit_code.append(await daemon.run())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_daemon)
        await wait_until(lambda: "running" in daemon.events)
        plugin.dra_socket.unlink()
        with trio.fail_after(10):
            await wait_until(lambda: bool(exit_code))

    assert exit_code == [EXIT_FATAL]
    assert "dra failed" in (daemon.shutdown_reason or "")
    # The same sequence SIGTERM takes: services stopped, then the root scope cancelled.
    assert daemon.events[-4:] == ["stopping dra", "stopped dra", "cancel root", "exit 1"]
    assert not plugin.dra_socket.exists()
    assert not plugin.registration_socket.exists()
