"""The ttrpc client against a raw peer: deadlines it enforces itself, late and foreign
messages, and what waiting calls see when the client stops.
(Written to kill the mutants `nox -s mutation` found surviving in nri/ttrpc.py, which
held the client too.)"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from nri_resmgr._gen import ttrpc as envelope
from nri_resmgr._gen.nri.pkg.api import v1alpha1 as api
from nri_resmgr.nri.errors import Code, ConnectionLost, ProtocolError, RpcError
from nri_resmgr.nri.mux import Mux
from nri_resmgr.nri.ttrpc import RawHandler, TtrpcServer
from nri_resmgr.nri.ttrpc_client import TtrpcClient
from nri_resmgr.nri.ttrpc_codec import MSG_REQUEST, MSG_RESPONSE, Message, Writer, encode_message
from tests.nri.helpers import RawPeer, mux_pair, socket_pair

GUARD = 10  # a hang guard only
MSG_DATA = 3  # a ttrpc stream-data message: neither a request nor a response


class Peer(RawPeer):
    """The server side of a client's connection, by hand: reads requests, writes raw bytes."""

    async def request(self) -> Message:
        return await self.message()

    async def answer(self, stream_id: int, response: envelope.Response) -> None:
        await self.send_all(encode_message(Message(stream_id, MSG_RESPONSE, bytes(response))))


@asynccontextmanager
async def client_and_peer() -> AsyncIterator[tuple[TtrpcClient, Peer, trio.Nursery]]:
    with trio.fail_after(GUARD):
        async with mux_pair() as muxes, trio.open_nursery() as nursery:
            client = TtrpcClient(muxes.ours.channel(1))
            nursery.start_soon(client.run)
            yield client, Peer(muxes.theirs.channel(1)), nursery
            nursery.cancel_scope.cancel()


def ok(payload: bytes) -> envelope.Response:
    return envelope.Response(status=envelope.Status(code=Code.OK), payload=payload)


async def test_a_silent_server_is_deadline_exceeded_by_the_clients_own_timer() -> None:
    async with client_and_peer() as (client, peer, _):
        with pytest.raises(RpcError) as info:
            await client.call_raw("svc", "M", b"", 0.05)
        assert info.value.code == Code.DEADLINE_EXCEEDED
        assert info.value.message == "svc/M: no answer within 0.05s"
        assert not client._pending  # the timed-out call left nothing behind
        # The typed call passes its timeout on too.
        with pytest.raises(RpcError) as info:
            await client.call("svc", "T", api.KeyValue(), api.KeyValue, 0.05)
        assert info.value.message == "svc/T: no answer within 0.05s"
        assert (await peer.request()).stream_id == 1


async def test_a_late_response_is_dropped_and_the_next_call_still_works(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="nri_resmgr.nri.ttrpc_client")
    async with client_and_peer() as (client, peer, _):
        with pytest.raises(RpcError):
            await client.call_raw("svc", "M", b"", 0.01)
        first = await peer.request()
        await peer.answer(first.stream_id, ok(b"late"))
        async with trio.open_nursery() as calls:
            calls.start_soon(peer_answers_next, peer)
            assert await client.call_raw("svc", "M", b"", None) == b"fresh"
    assert "ttrpc client: late response on stream 1 dropped" in caplog.messages


async def peer_answers_next(peer: Peer) -> None:
    msg = await peer.request()
    await peer.answer(msg.stream_id, ok(b"fresh"))


async def test_a_message_that_is_no_response_is_ignored_by_the_client(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="nri_resmgr.nri.ttrpc_client")
    async with client_and_peer() as (client, peer, nursery):
        result: list[bytes] = []
        answered = trio.Event()

        async def call() -> None:
            result.append(await client.call_raw("svc", "M", b"", None))
            answered.set()

        nursery.start_soon(call)
        msg = await peer.request()
        await peer.send_all(encode_message(Message(msg.stream_id, MSG_DATA, b"x")))
        await peer.answer(msg.stream_id, ok(b"answer"))
        await answered.wait()
        assert result == [b"answer"]
    assert "ttrpc client: ignoring message type 0x3" in caplog.messages


async def test_a_message_that_is_no_request_is_ignored_by_the_server(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="nri_resmgr.nri.ttrpc")
    with trio.fail_after(GUARD):
        async with mux_pair() as muxes, trio.open_nursery() as nursery:
            nursery.start_soon(TtrpcServer(muxes.theirs.channel(1), {}).serve)
            client = Peer(muxes.ours.channel(1))
            await client.send_all(encode_message(Message(1, MSG_DATA, b"x")))
            # Then a request on the same stream id: accepted, so the data message did not
            # count as one (a reused id would be refused with INVALID_ARGUMENT).
            request = envelope.Request(service="nope", method="M")
            await client.send_all(encode_message(Message(1, MSG_REQUEST, bytes(request))))
            msg = await client.message()
            nursery.cancel_scope.cancel()
    status = envelope.Response().parse(msg.data).status
    assert (status.code, status.message) == (Code.UNIMPLEMENTED, "service nope")
    assert "ttrpc server: ignoring message type 0x3" in caplog.messages


async def test_waiting_calls_fail_with_client_stopped_when_the_client_is_cancelled() -> None:
    a, _b = socket_pair()
    client = TtrpcClient(Mux(a).channel(1))
    failures: list[BaseException] = []

    async def call() -> None:
        try:
            await client.call_raw("svc", "Wait", b"", None)
        except ConnectionLost as exc:
            failures.append(exc)

    with trio.fail_after(GUARD):
        async with trio.open_nursery() as nursery:
            with trio.CancelScope() as reader:
                nursery.start_soon(call)
                await trio.testing.wait_all_tasks_blocked()
                reader.cancel()
                await client.run()
    [exc] = failures
    assert str(exc) == "svc/Wait: ttrpc client stopped"
    with pytest.raises(ConnectionLost, match=r"ttrpc client stopped"):
        await client.call_raw("svc", "M", b"", None)


async def test_an_undecodable_typed_reply_names_the_call_and_the_type() -> None:
    async with client_and_peer() as (client, peer, nursery):

        async def answer_garbage() -> None:
            msg = await peer.request()
            await peer.answer(msg.stream_id, ok(b"\x0a"))  # a truncated field

        nursery.start_soon(answer_garbage)
        with pytest.raises(ProtocolError, match=r"^svc/M: cannot decode KeyValue: "):
            await client.call("svc", "M", api.KeyValue(), api.KeyValue, None)


async def test_an_error_status_is_raised_with_its_code_and_message() -> None:
    async with client_and_peer() as (client, peer, nursery):

        async def refuse() -> None:
            msg = await peer.request()
            status = envelope.Status(code=Code.NOT_FOUND, message="no such pod")
            await peer.answer(msg.stream_id, envelope.Response(status=status))

        nursery.start_soon(refuse)
        with pytest.raises(RpcError) as info:
            await client.call_raw("svc", "M", b"", None)
    assert (info.value.code, info.value.message) == (Code.NOT_FOUND, "no such pod")


async def serve_one(handler: RawHandler, request: envelope.Request, stream_id: int = 1) -> Message:
    """One raw request to a server with ``svc/M`` = ``handler``; its reply message."""
    with trio.fail_after(GUARD):
        async with mux_pair() as muxes, trio.open_nursery() as nursery:
            nursery.start_soon(TtrpcServer(muxes.theirs.channel(1), {"svc": {"M": handler}}).serve)
            client = Peer(muxes.ours.channel(1))
            await client.send_all(encode_message(Message(stream_id, MSG_REQUEST, bytes(request))))
            reply = await client.message()
            nursery.cancel_scope.cancel()
    return reply


async def checkpointing(payload: bytes) -> bytes:
    await trio.sleep(0)  # one checkpoint: a deadline already past cancels here
    return b"done:" + payload


def status_of(msg: Message) -> tuple[int, str]:
    status = envelope.Response().parse(msg.data).status
    return status.code, status.message


async def test_the_server_enforces_the_requests_deadline_itself(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def slow(_: bytes) -> bytes:
        await trio.sleep_forever()
        return b""

    request = envelope.Request(service="svc", method="M", timeout_nano=20_000_000)
    reply = await serve_one(slow, request)
    assert reply.stream_id == 1
    assert status_of(reply) == (Code.DEADLINE_EXCEEDED, "deadline exceeded")
    assert "svc/M: handler missed the caller's deadline" in caplog.messages


@pytest.mark.parametrize("nanos", [0, 1_000_000_000])
async def test_no_deadline_or_a_distant_one_lets_the_handler_finish(nanos: int) -> None:
    request = envelope.Request(service="svc", method="M", payload=b"p", timeout_nano=nanos)
    reply = await serve_one(checkpointing, request)
    response = envelope.Response().parse(reply.data)
    assert (response.status.code, response.payload) == (Code.OK, b"done:p")


async def test_a_one_nanosecond_deadline_is_a_deadline() -> None:
    request = envelope.Request(service="svc", method="M", timeout_nano=1)
    reply = await serve_one(checkpointing, request)
    assert status_of(reply)[0] == Code.DEADLINE_EXCEEDED


async def test_an_even_stream_id_is_refused_with_the_reason() -> None:
    reply = await serve_one(checkpointing, envelope.Request(service="svc", method="M"), 2)
    assert status_of(reply) == (
        Code.INVALID_ARGUMENT,
        "StreamID must be odd for client initiated streams (got 2)",
    )


async def test_a_failing_handler_is_logged_with_its_service_and_method(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def fails(_: bytes) -> bytes:
        raise ValueError("broken")

    reply = await serve_one(fails, envelope.Request(service="svc", method="M"))
    assert status_of(reply) == (Code.UNKNOWN, "broken")
    assert "svc/M failed" in caplog.messages


async def test_a_write_to_a_closed_connection_is_a_lost_connection() -> None:
    a, _b = socket_pair()
    mux = Mux(a)
    await mux.aclose()
    with pytest.raises(ConnectionLost, match=r"^NRI socket write failed: "):
        await Writer(mux.channel(1)).write(Message(1, MSG_REQUEST, b""))
