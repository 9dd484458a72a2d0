"""One write per answer: what grpclib writes to a connection within one step reaches the socket
as one ``write`` when the step ends (``dra.grpc_writes``), checked with grpcio as kubelet and
on a recording transport for the rules (order, nesting, close, abort, handler tasks)."""

from __future__ import annotations

import asyncio
from typing import Any

import trio_asyncio

from nri_resmgr.dra.kubeletplugin import grpclib_private as grpc_writes
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
    server = running.plugin._dra._grpc
    assert server is not None
    return [p.connection._transport for p in server.protocols if hasattr(p, "connection")]


async def test_every_answer_to_grpcio_is_one_socket_write(
    running_plugin: RunningPlugin, kubelet: Kubelet
) -> None:
    channel = kubelet.channel(running_plugin.dra_socket)
    await kubelet.prepare("v1", channel, "warm-up")  # connection set up, settings exchanged
    [transport] = server_transports(running_plugin)
    assert isinstance(transport, grpc_writes._BatchingTransport)
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


def batching(recorder: Recorder) -> grpc_writes._BatchingTransport:
    return grpc_writes._BatchingTransport(recorder)  # type: ignore[arg-type]


def test_frames_of_one_step_go_out_together_and_in_order_when_it_ends() -> None:
    recorder = Recorder()
    transport = batching(recorder)
    transport.hold()
    transport.write(b"headers|")
    transport.write(b"")
    transport.write(b"data|")
    transport.write(b"trailers")
    assert recorder.writes == []  # nothing until the step is over
    transport.release()
    assert recorder.writes == [b"headers|data|trailers"]
    assert transport.get_extra_info("peername") == "kubelet"


def test_a_write_outside_a_step_goes_out_at_once() -> None:
    recorder = Recorder()
    transport = batching(recorder)
    transport.write(b"ping")
    assert recorder.writes == [b"ping"]
    transport.hold()
    transport.release()  # an empty step sends nothing
    assert recorder.writes == [b"ping"]


def test_nested_holds_send_when_the_outermost_ends() -> None:
    recorder = Recorder()
    transport = batching(recorder)
    transport.hold()
    transport.write(b"a")
    transport.hold()
    transport.write(b"b")
    transport.release()
    assert recorder.writes == []
    transport.release()
    assert recorder.writes == [b"ab"]


def test_close_sends_what_is_pending_and_abort_drops_it() -> None:
    closing, aborting = Recorder(), Recorder()
    transport = batching(closing)
    transport.hold()
    transport.write(b"goaway")
    transport.close()
    assert closing.writes == [b"goaway"] and closing.closed
    transport.release()  # the step that closed it ends: nothing more to send
    other = batching(aborting)
    other.hold()
    other.write(b"lost")
    other.abort()
    other.release()
    assert aborting.writes == [] and aborting.aborted


def test_nothing_is_written_once_the_transport_is_closing() -> None:
    recorder = Recorder()
    transport = batching(recorder)
    transport.hold()
    transport.write(b"late")
    recorder.closed = True  # the peer went away before the step ended
    transport.release()
    assert recorder.writes == []


async def in_asyncio(fn: Any) -> Any:
    return await trio_asyncio.aio_as_trio(fn)()


async def test_each_step_of_a_handler_task_is_one_write_and_schedules_nothing_more() -> None:
    async with trio_asyncio.open_loop():
        recorder = Recorder()
        scheduled: list[object] = []

        async def handler(transport: grpc_writes._BatchingTransport) -> str:
            transport.write(b"headers|")
            transport.write(b"data")
            await asyncio.sleep(0)  # a step ends here
            assert recorder.writes == [b"headers|data"]
            transport.write(b"trailers")
            return "done"

        async def run() -> str:
            loop = asyncio.get_running_loop()
            original = loop.call_soon
            loop.call_soon = lambda *a, **k: (scheduled.append(a[0]), original(*a, **k))[1]  # type: ignore[method-assign]
            try:
                transport = batching(recorder)
                task = loop.create_task(grpc_writes._BatchEachStep(handler(transport), transport))
                assert __file__ in repr(task)  # the repr shows where the handler is
                return await task
            finally:
                loop.call_soon = original  # type: ignore[method-assign]

        assert await in_asyncio(run) == "done"
        assert recorder.writes == [b"headers|data", b"trailers"]
        # Only the task's own steps and its waiter's wake-up: no flush callback.
        assert all("flush" not in repr(callback) for callback in scheduled), scheduled


async def test_a_cancelled_handler_task_sends_what_its_last_step_wrote() -> None:
    async with trio_asyncio.open_loop():
        recorder = Recorder()

        async def handler(transport: grpc_writes._BatchingTransport) -> None:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                transport.write(b"rst_stream")
                raise

        async def run() -> bool:
            transport = batching(recorder)
            task = asyncio.get_running_loop().create_task(
                grpc_writes._BatchEachStep(handler(transport), transport)
            )
            await asyncio.sleep(0)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                return task.cancelled()
            return False

        assert await in_asyncio(run)
        assert recorder.writes == [b"rst_stream"]
