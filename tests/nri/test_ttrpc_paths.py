"""ttrpc's failure paths, each with its code and message.
(Written to kill the mutants `nox -s mutation` found surviving in nri/ttrpc.py.)"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress

import pytest
import trio
import trio.testing

from nri_resmgr._gen.nri.pkg.api import v1alpha1 as api
from nri_resmgr.nri import wire
from nri_resmgr.nri.errors import Code, ConnectionLost, ProtocolError, RpcError
from nri_resmgr.nri.ttrpc import TtrpcClient, TtrpcServer, unary
from nri_resmgr.nri.ttrpc_codec import (
    MAX_MESSAGE_LEN,
    MSG_RESPONSE,
    Message,
    MessageDecoder,
    encode_message,
)

GUARD = 10  # a hang guard only
Handler = Callable[[api.KeyValue], Awaitable[api.KeyValue]]


@asynccontextmanager
async def served(handler: Handler) -> AsyncIterator[TtrpcClient]:
    a, b = trio.testing.memory_stream_pair()
    client = TtrpcClient(a)
    with trio.fail_after(GUARD):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(TtrpcServer(b, {"svc": {"M": unary(api.KeyValue, handler)}}).serve)
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
    a, b = trio.testing.memory_stream_pair()
    client = TtrpcClient(a)
    with trio.fail_after(GUARD):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.run)
            nursery.start_soon(client.call_raw, "svc", "M", b"p", timeout)
            decoder = MessageDecoder()
            msgs: list[Message] = []
            while not msgs:
                msgs = list(decoder.feed(await b.receive_some()))
            nursery.cancel_scope.cancel()
    assert wire.ttrpc_request(msgs[0].data) == ("svc", "M", b"p", nanos)


async def run_client_against(raw_reply: Callable[[int], bytes]) -> BaseException:
    """The client calls once; the peer answers with ``raw_reply(stream_id)``; returns what
    the client's reader raised."""
    a, b = trio.testing.memory_stream_pair()
    client = TtrpcClient(a)
    outcome: list[BaseException] = []

    async def reader() -> None:
        try:
            await client.run()
        except (ConnectionLost, ProtocolError) as exc:
            outcome.append(exc)

    with trio.fail_after(GUARD):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader)
            nursery.start_soon(_swallow, client.call_raw("svc", "M", b"", None))
            decoder = MessageDecoder()
            msgs: list[Message] = []
            while not msgs:
                msgs = list(decoder.feed(await b.receive_some()))
            await b.send_all(raw_reply(msgs[0].stream_id))
            await b.aclose()
    [exc] = outcome
    return exc


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
    a, b = trio.testing.memory_stream_pair()
    client = TtrpcClient(a)
    await b.aclose()
    with trio.fail_after(GUARD):
        with pytest.raises(ConnectionLost):
            await client.run()
        with pytest.raises(ConnectionLost, match=r"^ttrpc connection is closed \("):
            await client.call_raw("svc", "M", b"", None)


async def test_a_client_that_closes_ends_the_server_with_a_lost_connection() -> None:
    a, b = trio.testing.memory_stream_pair()
    await a.aclose()
    with trio.fail_after(GUARD), pytest.raises(ConnectionLost) as info:
        await TtrpcServer(b, {}).serve()
    assert str(info.value) == "ttrpc client closed the connection"
