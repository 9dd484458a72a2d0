"""The transport on live streams: mux framing, ttrpc dispatch and errors, bad input handling."""

from __future__ import annotations

import logging
import struct

import pytest
import trio
import trio.testing

from nri_resmgr._gen import ttrpc as envelope
from nri_resmgr._gen.nri.pkg.api import v1alpha1 as api
from nri_resmgr.nri import mux
from nri_resmgr.nri.errors import Code, RpcError
from nri_resmgr.nri.handlers import PLUGIN_SERVICE
from nri_resmgr.nri.mux import Mux, MuxChannel, encode_frames
from nri_resmgr.nri.ttrpc import TtrpcServer, unary
from nri_resmgr.nri.ttrpc_client import TtrpcClient
from nri_resmgr.nri.ttrpc_codec import MSG_REQUEST, Message, encode_message
from nri_resmgr.sim.runtime import Simulator
from tests.nri.helpers import (
    PinningPolicy,
    RawPeer,
    container,
    make_manager,
    mux_pair,
    pod,
    running_service,
    socket_pair,
)

GUARD = 10


async def _read_exactly(stream: trio.abc.ReceiveStream, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        buf += await stream.receive_some(n - len(buf))
    return buf


async def test_mux_splits_writes_and_reassembles_big_frames() -> None:
    ours, peer = socket_pair()
    mux = Mux(ours)
    data = bytes(range(256)) * 40
    got: list[bytes] = []

    def keep(payload: bytes) -> int:
        got.append(payload)
        return 0

    mux.channel(1).listen(keep)
    with trio.fail_after(GUARD):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(mux.run)
            await mux.channel(2).send_all(data)
            sizes = []
            for _ in range(3):
                conn, length = struct.unpack(">II", await _read_exactly(peer, 8))
                assert conn == 2
                sizes.append(length)
                await _read_exactly(peer, length)
            assert sizes == [4096, 4096, 2048]
            # A Go peer may send one frame of 4096+ bytes; it reads back as a plain stream.
            await peer.send_all(struct.pack(">II", 1, len(data)) + data)
            while len(b"".join(got)) < len(data):
                await trio.sleep(0.001)  # a condition polled, not a fixed wait
            assert b"".join(got) == data
            nursery.cancel_scope.cancel()


def _echo_server(channel: MuxChannel) -> TtrpcServer:
    async def echo(req: api.KeyValue) -> api.KeyValue:
        return api.KeyValue(key=req.value, value=req.key)

    async def slow(req: api.Empty) -> api.Empty:
        await trio.sleep_forever()
        return api.Empty()

    return TtrpcServer(
        channel, {"svc": {"Echo": unary(api.KeyValue, echo), "Slow": unary(api.Empty, slow)}}
    )


async def test_ttrpc_calls_unknown_methods_and_timeouts() -> None:
    with trio.fail_after(GUARD):
        async with mux_pair() as muxes, trio.open_nursery() as nursery:
            client = TtrpcClient(muxes.ours.channel(1))
            nursery.start_soon(_echo_server(muxes.theirs.channel(1)).serve)
            nursery.start_soon(client.run)
            reply = await client.call("svc", "Echo", api.KeyValue("k", "v"), api.KeyValue, 1.0)
            assert (reply.key, reply.value) == ("v", "k")
            with pytest.raises(RpcError) as info:
                await client.call_raw("svc", "Nope", b"", 1.0)
            assert (info.value.code, info.value.message) == (Code.UNIMPLEMENTED, "method Nope")
            with pytest.raises(RpcError) as info:
                await client.call_raw("other", "Echo", b"", 1.0)
            assert (info.value.code, info.value.message) == (Code.UNIMPLEMENTED, "service other")
            with pytest.raises(RpcError) as info:
                await client.call_raw("svc", "Echo", b"\x08", 1.0)  # a cut-off varint
            assert info.value.code == Code.INTERNAL
            # The caller's deadline travels in timeout_nano and bounds the handler too.
            with pytest.raises(RpcError) as info:
                await client.call_raw("svc", "Slow", b"", 0.05)
            assert info.value.code == Code.DEADLINE_EXCEEDED
            nursery.cancel_scope.cancel()


async def test_ttrpc_server_refuses_even_and_reused_stream_ids() -> None:
    with trio.fail_after(GUARD):
        async with mux_pair() as muxes, trio.open_nursery() as nursery:
            nursery.start_soon(_echo_server(muxes.theirs.channel(1)).serve)
            client = RawPeer(muxes.ours.channel(1))
            for stream_id in (2, 5, 5):
                await client.send_all(encode_message(Message(stream_id, MSG_REQUEST, b"")))
            codes = []
            for _ in range(3):
                msg = await client.message()
                codes.append((msg.stream_id, envelope.Response().parse(msg.data).status.code))
            assert sorted(codes) == [(2, 3), (5, 3), (5, 12)]
            nursery.cancel_scope.cancel()


async def test_plugin_answers_unknown_method_with_unimplemented(sock_path: str) -> None:
    with trio.fail_after(GUARD):
        async with Simulator.listen(sock_path) as sim, running_service(make_manager(), sock_path):
            plugin = await sim.wait_plugin()
            with pytest.raises(RpcError) as info:
                await plugin.client.call_raw(PLUGIN_SERVICE, "NoSuchMethod", b"", 1.0)
            assert info.value.code == Code.UNIMPLEMENTED


async def test_state_change_is_served_for_new_runtimes_too(sock_path: str) -> None:
    policy = PinningPolicy()
    manager = make_manager(policy)
    with trio.fail_after(GUARD):
        async with Simulator.listen(sock_path) as sim, running_service(manager, sock_path):
            plugin = await sim.wait_plugin()
            evt = api.StateChangeEvent(event=api.Event.RUN_POD_SANDBOX, pod=pod(5))
            await plugin.call("StateChange", evt, api.Empty)
            assert "pod5" in policy.pods


async def test_messages_above_4096_bytes_cross_the_stack(sock_path: str) -> None:
    big = api.Container(id="big", pod_sandbox_id="pod0", name="big", annotations={"a": "x" * 9000})
    policy = PinningPolicy()
    manager = make_manager(policy)
    with trio.fail_after(GUARD):
        async with (
            Simulator.listen(sock_path, pods=[pod()], containers=[big]) as sim,
            running_service(manager, sock_path),
        ):
            await sim.wait_plugin()
            assert policy.containers["big"].annotations["a"] == "x" * 9000


@pytest.mark.parametrize(
    "garbage",
    [
        pytest.param(struct.pack(">II", 9, 4) + b"junk", id="unknown-conn-id"),
        pytest.param(
            encode_frames(1, struct.pack(">IIBB", (4 << 20) + 1, 99, MSG_REQUEST, 0)),
            id="oversized-ttrpc-message",
        ),
        pytest.param(struct.pack(">II", 1, 64 << 20), id="oversized-mux-frame"),
        pytest.param(
            encode_frames(2, struct.pack(">IIBB", 4, 2, 2, 0) + b"\x0a\x00\x12\x00"),
            id="response-to-unopened-stream",
        ),
    ],
)
async def test_bad_input_drops_the_connection_and_the_service_redials(
    sock_path: str, garbage: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="nri_resmgr.nri.service")
    manager = make_manager()
    with trio.fail_after(GUARD):
        async with Simulator.listen(sock_path) as sim, running_service(manager, sock_path) as svc:
            first = await sim.wait_plugin()
            await first.send_raw(garbage)
            second = await sim.wait_plugin()
            assert first.closed.is_set() and not second.closed.is_set()
            rsp = await sim.create_container(pod(), container(1))
            assert rsp.adjust.linux.resources.cpu.cpus == "0-1"
            assert svc.connections == 2
    assert any("lost" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("half_sent", "what"),
    [
        pytest.param(struct.pack(">II", 1, 100) + b"abc", "11 bytes of a mux frame", id="frame"),
        pytest.param(
            encode_frames(1, struct.pack(">IIBB", 100, 99, MSG_REQUEST, 0) + b"abc"),
            "13 bytes of a ttrpc message on connection 1",
            id="ttrpc-message",
        ),
    ],
)
async def test_a_half_sent_message_closes_the_connection_at_the_bound_and_the_service_redials(
    sock_path: str,
    half_sent: bytes,
    what: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 34 item 8: a message promising more bytes than come used to hold the channel,
    unanswered, for as long as the runtime stayed connected."""
    monkeypatch.setattr(mux, "INCOMPLETE_TIMEOUT", 0.2)
    caplog.set_level(logging.WARNING, logger="nri_resmgr.nri.service")
    with trio.fail_after(GUARD):
        async with Simulator.listen(sock_path) as sim, running_service(make_manager(), sock_path):
            first = await sim.wait_plugin()
            await first.send_raw(half_sent)
            second = await sim.wait_plugin()
            assert first.closed.is_set() and not second.closed.is_set()
            rsp = await sim.create_container(pod(), container(1))
            assert rsp.adjust.linux.resources.cpu.cpus == "0-1"
    [line] = [r.getMessage() for r in caplog.records if "lost" in r.getMessage()]
    assert f"the NRI peer sent {what} and nothing more for 0.2 s: closing the connection" in line
