"""The wire codecs: mux frames and ttrpc messages, by example and by property."""

from __future__ import annotations

import contextlib
import struct

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from nri_resmgr._gen import ttrpc as envelope
from nri_resmgr._gen.nri.pkg.api import v1alpha1 as api
from nri_resmgr.nri import wire
from nri_resmgr.nri.errors import Code, ProtocolError, RpcError
from nri_resmgr.nri.mux import MAX_SEND_PAYLOAD, FrameDecoder, encode_frames
from nri_resmgr.nri.ttrpc import TtrpcServer, unary
from nri_resmgr.nri.ttrpc_codec import (
    MAX_MESSAGE_LEN,
    MSG_REQUEST,
    Message,
    MessageDecoder,
    encode_message,
)
from tests.nri.helpers import RawPeer, mux_pair


def test_ttrpc_header_layout() -> None:
    wire = encode_message(Message(stream_id=3, msg_type=MSG_REQUEST, data=b"abc", flags=0))
    assert wire == b"\x00\x00\x00\x03" + b"\x00\x00\x00\x03" + b"\x01\x00" + b"abc"


def test_request_envelope_field_numbers() -> None:
    req = envelope.Request(
        service="s",
        method="m",
        payload=b"\x01",
        timeout_nano=5,
        metadata=[envelope.KeyValue("k", "v")],
    )
    assert bytes(req) == b"\x0a\x01s\x12\x01m\x1a\x01\x01\x20\x05\x2a\x06\x0a\x01k\x12\x01v"
    status = envelope.Response(status=envelope.Status(code=12, message="x"))
    assert bytes(status) == b"\x0a\x05\x08\x0c\x12\x01x"


def test_oversized_message_is_refused_locally() -> None:
    with pytest.raises(RpcError) as info:
        encode_message(Message(1, MSG_REQUEST, b"\x00" * (MAX_MESSAGE_LEN + 1)))
    assert info.value.code == Code.RESOURCE_EXHAUSTED


def test_oversized_header_is_refused_before_the_body_arrives() -> None:
    header = struct.pack(">IIBB", MAX_MESSAGE_LEN + 1, 1, MSG_REQUEST, 0)
    with pytest.raises(ProtocolError, match="exceeds the maximum message size"):
        list(MessageDecoder().feed(header))


def test_frames_never_carry_more_than_4096_bytes() -> None:
    data = bytes(range(256)) * 40  # 10240 bytes
    wire = encode_frames(2, data)
    sizes = []
    offset = 0
    while offset < len(wire):
        conn, length = struct.unpack_from(">II", wire, offset)
        assert conn == 2
        sizes.append(length)
        offset += 8 + length
    assert sizes == [4096, 4096, 2048]
    assert b"".join(p for _, p in FrameDecoder([1, 2]).feed(wire)) == data


def test_unknown_connection_id_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="unknown connection id 7"):
        list(FrameDecoder([1, 2]).feed(struct.pack(">II", 7, 0)))


@given(st.binary(max_size=3 * MAX_SEND_PAYLOAD), st.sampled_from([1, 2]))
def test_frame_round_trip(data: bytes, conn: int) -> None:
    frames = list(FrameDecoder([1, 2]).feed(encode_frames(conn, data)))
    assert all(c == conn and len(p) <= MAX_SEND_PAYLOAD for c, p in frames)
    assert b"".join(p for _, p in frames) == data


@given(
    st.lists(
        st.tuples(st.integers(1, 2**32 - 1), st.sampled_from([1, 2, 3]), st.binary(max_size=300)),
        max_size=8,
    ),
    st.integers(1, 64),
)
def test_message_round_trip_in_arbitrary_pieces(
    messages: list[tuple[int, int, bytes]], piece: int
) -> None:
    wire = b"".join(encode_message(Message(s, t, d)) for s, t, d in messages)
    decoder = MessageDecoder()
    out = [m for i in range(0, len(wire), piece) for m in decoder.feed(wire[i : i + piece])]
    assert [(m.stream_id, m.msg_type, m.data) for m in out] == messages
    assert decoder.pending() == 0


@given(st.binary(max_size=2000))
def test_arbitrary_bytes_only_ever_raise_protocol_error(data: bytes) -> None:
    for decoder in (FrameDecoder([1, 2]), MessageDecoder()):
        with contextlib.suppress(ProtocolError):
            list(decoder.feed(data))


@given(st.binary(max_size=500))
def test_any_request_envelope_gets_one_answer_and_the_server_keeps_serving(data: bytes) -> None:
    """Whatever bytes arrive as a Request envelope, the server answers that stream with the
    code the envelope decoder implies (INVALID_ARGUMENT for undecodable bytes), and a valid
    call after it is still served."""
    replies = trio.run(_bad_envelope_then_echo, data)
    assert replies[3].status.code == Code.OK
    assert api.KeyValue().parse(replies[3].payload) == api.KeyValue(key="v", value="k")
    try:
        service, method, _, _ = wire.ttrpc_request(data)
    except wire.WireError:
        assert replies[1].status.code == Code.INVALID_ARGUMENT
        assert replies[1].status.message.startswith("bad request: ")
        return
    if (service, method) != ("svc", "Echo"):
        assert replies[1].status.code == Code.UNIMPLEMENTED


async def _echo(req: api.KeyValue) -> api.KeyValue:
    return api.KeyValue(key=req.value, value=req.key)


async def _bad_envelope_then_echo(data: bytes) -> dict[int, envelope.Response]:
    good = envelope.Request(service="svc", method="Echo", payload=bytes(api.KeyValue("k", "v")))
    replies: dict[int, envelope.Response] = {}
    with trio.fail_after(10):  # a guard against a hang, not a timing check
        async with mux_pair() as muxes, trio.open_nursery() as nursery:
            server = TtrpcServer(
                muxes.theirs.channel(1), {"svc": {"Echo": unary(api.KeyValue, _echo)}}
            )
            nursery.start_soon(server.serve)
            client = RawPeer(muxes.ours.channel(1))
            await client.send_all(encode_message(Message(1, MSG_REQUEST, data)))
            await client.send_all(encode_message(Message(3, MSG_REQUEST, bytes(good))))
            while len(replies) < 2:
                msg = await client.message()
                assert msg.stream_id not in replies, "two answers on one stream"
                replies[msg.stream_id] = envelope.Response().parse(msg.data)
            nursery.cancel_scope.cancel()
    return replies
