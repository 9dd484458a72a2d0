"""One write per answer: what grpclib writes within one loop step reaches the socket as one
``write`` (``grpc_bridge._CoalescingTransport``), checked with grpcio as kubelet and on a
recording transport for the rules (order, close, abort)."""

from __future__ import annotations

import asyncio
from typing import Any

import trio
import trio_asyncio

from nri_resmgr.dra import grpc_bridge
from tests.dra.conftest import RunningPlugin
from tests.dra.kubelet_client import Kubelet

CALLS = 20


class Recorder:
    """Stands in for an asyncio transport; keeps every write."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.aborted = False

    def write(self, data: bytes) -> None:
        assert not self.closed, "write after close"
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": "kubelet"}.get(name, default)


def server_transports(running: RunningPlugin) -> list[Any]:
    server = running.plugin._dra._server
    assert server is not None
    return [p.connection._transport for p in server.protocols if hasattr(p, "connection")]


async def test_every_answer_to_grpcio_is_one_socket_write(
    running_plugin: RunningPlugin, kubelet: Kubelet
) -> None:
    channel = kubelet.channel(running_plugin.dra_socket)
    await kubelet.prepare("v1", channel, "warm-up")  # connection set up, settings exchanged
    [transport] = server_transports(running_plugin)
    assert isinstance(transport, grpc_bridge._CoalescingTransport)
    writes: list[int] = []
    real = transport._transport
    original = real.write
    real.write = lambda data: (writes.append(len(data)), original(data))[1]
    try:
        for i in range(CALLS):
            answer = await kubelet.prepare("v1", channel, f"uid-{i}")
            assert set(answer.claims) == {f"uid-{i}"}
    finally:
        real.write = original
    # Headers, message and trailers of each answer in one write (grpclib alone: three).
    # grpcio's occasional PING (its bandwidth probe) is answered with its own write.
    assert CALLS <= len(writes) <= CALLS + 2, writes


async def in_asyncio(fn: Any) -> Any:
    return await trio_asyncio.aio_as_trio(fn)()


async def test_frames_of_one_step_go_out_together_and_in_order() -> None:
    async with trio_asyncio.open_loop():
        recorder = Recorder()

        async def step() -> None:
            transport = grpc_bridge._CoalescingTransport(recorder)  # type: ignore[arg-type]
            transport.write(b"headers|")
            transport.write(b"")
            transport.write(b"data|")
            transport.write(b"trailers")
            assert recorder.writes == []  # nothing until the step is over
            await asyncio.sleep(0)
            assert recorder.writes == [b"headers|data|trailers"]
            transport.write(b"next")
            await asyncio.sleep(0)
            assert transport.get_extra_info("peername") == "kubelet"

        await in_asyncio(step)
        assert recorder.writes == [b"headers|data|trailers", b"next"]


async def test_close_sends_what_is_pending_and_abort_drops_it() -> None:
    async with trio_asyncio.open_loop():
        closing, aborting = Recorder(), Recorder()

        async def step() -> None:
            transport = grpc_bridge._CoalescingTransport(closing)  # type: ignore[arg-type]
            transport.write(b"goaway")
            transport.close()
            assert closing.writes == [b"goaway"] and closing.closed
            other = grpc_bridge._CoalescingTransport(aborting)  # type: ignore[arg-type]
            other.write(b"lost")
            other.abort()
            await asyncio.sleep(0)  # the scheduled flush finds nothing to send

        await in_asyncio(step)
        assert aborting.writes == [] and aborting.aborted


async def test_nothing_is_written_once_the_transport_is_closing() -> None:
    async with trio_asyncio.open_loop():
        recorder = Recorder()

        async def step() -> None:
            transport = grpc_bridge._CoalescingTransport(recorder)  # type: ignore[arg-type]
            transport.write(b"late")
            recorder.closed = True  # the peer went away before the flush
            await asyncio.sleep(0)

        await in_asyncio(step)
        assert recorder.writes == []


async def test_the_idle_server_schedules_nothing() -> None:
    async with trio_asyncio.open_loop():
        recorder = Recorder()
        scheduled: list[object] = []

        async def step() -> None:
            loop = asyncio.get_running_loop()
            original = loop.call_soon
            loop.call_soon = lambda *a, **k: (scheduled.append(a[0]), original(*a, **k))[1]  # type: ignore[method-assign]
            try:
                transport = grpc_bridge._CoalescingTransport(recorder)  # type: ignore[arg-type]
                transport.write(b"")
                transport.flush()
            finally:
                loop.call_soon = original  # type: ignore[method-assign]

        await in_asyncio(step)
        assert scheduled == [] and recorder.writes == []
        await trio.lowlevel.checkpoint()
