"""ttrpc's failure paths, each with its code and message.
(Written to kill the mutants `nox -s mutation` found surviving in nri/ttrpc.py, which
held the client too.)"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress

import pytest
import trio
import trio.testing
from trio.testing import MockClock

from nri_resmgr._gen.nri.pkg.api import v1alpha1 as api
from nri_resmgr.nri import wire
from nri_resmgr.nri.errors import Code, ConnectionLost, ProtocolError, RpcError
from nri_resmgr.nri.ttrpc import Sync, TtrpcServer, unary
from nri_resmgr.nri.ttrpc_client import TtrpcClient
from nri_resmgr.nri.ttrpc_codec import MAX_MESSAGE_LEN, MSG_RESPONSE, Message, encode_message
from tests.nri.helpers import RawPeer, mux_pair

GUARD = 10  # a hang guard only
Handler = Callable[[api.KeyValue], Awaitable[api.KeyValue]]


@asynccontextmanager
async def served(handler: Handler) -> AsyncIterator[TtrpcClient]:
    with trio.fail_after(GUARD):
        async with mux_pair() as muxes, trio.open_nursery() as nursery:
            client = TtrpcClient(muxes.ours.channel(1))
            server = TtrpcServer(
                muxes.theirs.channel(1), {"svc": {"M": unary(api.KeyValue, handler)}}
            )
            nursery.start_soon(server.serve)
            nursery.start_soon(client.run)
            yield client
            nursery.cancel_scope.cancel()


async def call_error(handler: Handler, payload: bytes = b"") -> RpcError:
    async with served(handler) as client:
        with pytest.raises(RpcError) as info:
            await client.call_raw("svc", "M", payload, 5.0)
    return info.value


async def test_a_handler_exception_is_unknown_with_its_text_or_type() -> None:
    async def fails(_: api.KeyValue) -> api.KeyValue:
        raise ValueError("no such thing")

    async def fails_silently(_: api.KeyValue) -> api.KeyValue:
        raise ValueError()

    err = await call_error(fails)
    assert (err.code, err.message) == (Code.UNKNOWN, "no such thing")
    err = await call_error(fails_silently)
    assert (err.code, err.message) == (Code.UNKNOWN, "ValueError")


async def test_a_reply_too_big_to_send_is_refused_to_the_caller() -> None:
    async def huge(_: api.KeyValue) -> api.KeyValue:
        return api.KeyValue(key="k", value="x" * (MAX_MESSAGE_LEN + 1))

    err = await call_error(huge)
    assert err.code == Code.RESOURCE_EXHAUSTED
    assert "exceeds maximum message size" in err.message


async def test_a_handler_past_the_callers_deadline_is_deadline_exceeded() -> None:
    async def slow(_: api.KeyValue) -> api.KeyValue:
        await trio.sleep_forever()
        return api.KeyValue()

    async with served(slow) as client:
        with pytest.raises(RpcError) as info:
            await client.call_raw("svc", "M", b"", 0.05)
    assert info.value.code == Code.DEADLINE_EXCEEDED


async def test_an_undecodable_request_names_the_type() -> None:
    async def echo(req: api.KeyValue) -> api.KeyValue:
        return req

    err = await call_error(echo, b"\x08")
    assert err.code == Code.INTERNAL
    assert err.message.startswith("cannot decode KeyValue: ")


@pytest.mark.parametrize("timeout, nanos", [(None, 0), (0.5, 500_000_000), (2.0, 2_000_000_000)])
async def test_the_callers_timeout_travels_in_nanoseconds(
    timeout: float | None, nanos: int
) -> None:
    with trio.fail_after(GUARD):
        async with mux_pair() as muxes, trio.open_nursery() as nursery:
            client = TtrpcClient(muxes.ours.channel(1))
            peer = RawPeer(muxes.theirs.channel(1))
            nursery.start_soon(client.run)
            nursery.start_soon(client.call_raw, "svc", "M", b"p", timeout)
            msg = await peer.message()
            nursery.cancel_scope.cancel()
    assert wire.ttrpc_request(msg.data) == ("svc", "M", b"p", nanos)


async def run_client_against(raw_reply: Callable[[int], bytes]) -> BaseException:
    """The client calls once; the peer answers with ``raw_reply(stream_id)`` and closes;
    returns what ended the connection on our side: a protocol error the client found
    (raised in the mux reader, which hands the client its bytes), else what the client's
    reader raised."""
    outcome: list[BaseException] = []
    with trio.fail_after(GUARD):
        async with mux_pair() as muxes:
            client = TtrpcClient(muxes.ours.channel(1))
            peer = RawPeer(muxes.theirs.channel(1))

            async def reader() -> None:
                try:
                    await client.run()
                except ConnectionLost as exc:
                    outcome.append(exc)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(reader)
                nursery.start_soon(_swallow, client.call_raw("svc", "M", b"", None))
                msg = await peer.message()
                await peer.send_all(raw_reply(msg.stream_id))
                await muxes.theirs.aclose()
        found = muxes.ended.get(muxes.ours)
    return found if isinstance(found, ProtocolError) else outcome[0]


async def _swallow(call: Awaitable[bytes]) -> None:
    with suppress(RpcError, ConnectionLost):
        await call


async def test_a_response_for_a_stream_never_opened_is_a_protocol_error() -> None:
    exc = await run_client_against(lambda sid: encode_message(Message(sid + 2, MSG_RESPONSE, b"")))
    assert isinstance(exc, ProtocolError)
    assert str(exc) == "ttrpc response for stream 3, which we never opened"


async def test_an_undecodable_response_is_a_protocol_error_and_fails_its_call() -> None:
    # The call waits without a timeout: only the reader failing it can end it.
    exc = await run_client_against(lambda sid: encode_message(Message(sid, MSG_RESPONSE, b"\x0a")))
    assert isinstance(exc, ProtocolError)
    assert str(exc).startswith("undecodable ttrpc response on stream 1: ")


async def test_a_server_that_closes_is_a_lost_connection_for_every_call() -> None:
    exc = await run_client_against(lambda sid: b"")
    assert isinstance(exc, ConnectionLost)
    assert str(exc) == "ttrpc server closed the connection"


async def test_calls_after_the_connection_closed_fail_at_once() -> None:
    with trio.fail_after(GUARD):
        async with mux_pair() as muxes:
            client = TtrpcClient(muxes.ours.channel(1))
            await muxes.theirs.aclose()
            with pytest.raises(ConnectionLost):
                await client.run()
            with pytest.raises(ConnectionLost, match=r"^ttrpc connection is closed \("):
                await client.call_raw("svc", "M", b"", None)


async def test_a_client_that_closes_ends_the_server_with_a_lost_connection() -> None:
    with trio.fail_after(GUARD):
        async with mux_pair() as muxes:
            await muxes.ours.aclose()
            with pytest.raises(ConnectionLost) as info:
                await TtrpcServer(muxes.theirs.channel(1), {}).serve()
    assert str(info.value) == "ttrpc client closed the connection"


async def _deadline_exceeded(client: TtrpcClient) -> None:
    with pytest.raises(RpcError) as info:
        await client.call_raw("svc", "M", b"3", 1.0)
    assert info.value.code == Code.DEADLINE_EXCEEDED  # the client's own timer


class _Recorder:
    """An Observer that keeps what it is told, with virtual times."""

    def __init__(self) -> None:
        self.done_calls: list[tuple[str, bool, float]] = []

    def start(self) -> float:
        return trio.current_time()

    def done(self, method: str, started: float | None, ok: bool) -> None:
        assert started is not None
        self.done_calls.append((method, ok, trio.current_time() - started))


async def test_the_observer_times_each_answer_from_before_its_wait_for_the_lock(
    mock_clock: MockClock,
) -> None:
    """What the request metrics see: an answer in place, one that waited 3 s for the lock
    (counted with its wait) and one whose deadline passed while it waited (an error)."""
    lock = trio.Lock()
    observer = _Recorder()
    methods = {"svc": {"M": Sync(lambda payload: b"ok:" + payload, lock)}}
    async with mux_pair() as muxes, trio.open_nursery() as nursery:
        client = TtrpcClient(muxes.ours.channel(1))
        nursery.start_soon(TtrpcServer(muxes.theirs.channel(1), methods, observer).serve)
        nursery.start_soon(client.run)
        assert await client.call_raw("svc", "M", b"1", None) == b"ok:1"
        async with trio.open_nursery() as calls, lock:
            calls.start_soon(client.call_raw, "svc", "M", b"2", None)
            await trio.testing.wait_all_tasks_blocked()
            mock_clock.jump(3)
        async with lock, trio.open_nursery() as calls:
            calls.start_soon(_deadline_exceeded, client)
            await trio.testing.wait_all_tasks_blocked()
            mock_clock.jump(1.5)
        await trio.testing.wait_all_tasks_blocked()  # the server's deadline, then its answer
        nursery.cancel_scope.cancel()
    assert observer.done_calls == [("M", True, 0.0), ("M", True, 3.0), ("M", False, 1.5)]
