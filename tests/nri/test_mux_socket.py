"""The mux on its socket: direct writes that do not fit, concurrent writers, pushed reads."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from nri_resmgr.nri.errors import ConnectionLost
from nri_resmgr.nri.mux import MAX_SEND_PAYLOAD, FrameDecoder, Mux
from nri_resmgr.nri.ttrpc_codec import MSG_RESPONSE, Message, MessageDecoder, encode_header
from tests.nri.helpers import socket_pair

GUARD = 10
BIG = 1 << 20  # far more than a unix socket buffer holds: the direct write cannot finish


async def _read_frames(stream: trio.SocketStream, total: int) -> list[tuple[int, bytes]]:
    decoder = FrameDecoder([1, 2])
    frames: list[tuple[int, bytes]] = []
    received = 0
    while received < total:
        data = await stream.receive_some(65536)
        assert data, "peer closed early"
        received += len(data)
        frames += decoder.feed(data)
    return frames


def _message(stream_id: int, size: int) -> Message:
    return Message(stream_id, MSG_RESPONSE, bytes([stream_id]) * size)


async def test_big_messages_from_concurrent_writers_arrive_whole_and_in_small_frames() -> None:
    ours, peer = socket_pair()
    mux = Mux(ours)
    channel = mux.channel(1)
    messages = [_message(1, BIG), _message(3, BIG), _message(5, 100)]
    wire_len = sum(10 + len(m.data) for m in messages)
    wire_len += 8 * sum(-(-(10 + len(m.data)) // MAX_SEND_PAYLOAD) for m in messages)
    with trio.fail_after(GUARD):
        async with trio.open_nursery() as nursery:
            for msg in messages:
                nursery.start_soon(channel.send_message, encode_header(msg), msg.data)
            frames = await _read_frames(peer, wire_len)
    assert all(conn == 1 and len(payload) <= MAX_SEND_PAYLOAD for conn, payload in frames)
    got = list(MessageDecoder().feed(b"".join(payload for _, payload in frames)))
    # Each message is contiguous on the wire: decoding the joined stream gives them whole.
    assert sorted(got, key=lambda m: m.stream_id) == messages


async def test_payloads_that_arrive_before_listen_are_handed_over_first_in_order() -> None:
    ours, peer = socket_pair()
    mux = Mux(ours)
    got: list[bytes] = []
    with trio.fail_after(GUARD):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_run_until_the_peer_closes, mux)
            await peer.send_all(b"\0\0\0\1\0\0\0\3one")
            while not mux.channel(1)._queued:
                await trio.sleep(0.001)  # a condition polled, not a fixed wait
            mux.channel(1).listen(lambda payload: _keep(got, payload))
            await peer.send_all(b"\0\0\0\1\0\0\0\3two")
            await peer.aclose()
            await mux.channel(1).wait_closed()
    assert got == [b"one", b"two"]


def _keep(got: list[bytes], payload: bytes) -> int:
    got.append(payload)
    return 0


async def _run_until_the_peer_closes(mux: Mux) -> None:
    with pytest.raises(ConnectionLost, match="closed by the peer"):
        await mux.run()


async def test_a_write_after_the_trunk_is_closed_fails_instead_of_writing_elsewhere() -> None:
    ours, _peer = socket_pair()
    mux = Mux(ours)
    await mux.aclose()
    with pytest.raises(ConnectionLost):
        await mux.channel(1).send_message(b"h" * 10, b"body")


async def test_a_synchronous_write_that_does_not_fit_keeps_the_trunk_for_its_rest() -> None:
    """send_message_nowait: what the socket did not take is returned to run in a task, with
    the send lock already held, so a write started meanwhile cannot come in between."""
    ours, peer = socket_pair()
    mux = Mux(ours)
    channel = mux.channel(1)
    big, small = _message(1, BIG), _message(3, 100)
    rest = channel.send_message_nowait(encode_header(big), big.data)
    assert rest is not None, "a 1 MiB write cannot fit a unix socket buffer"
    assert channel.send_message_nowait(encode_header(small), small.data) is not None
    wire_len = sum(10 + len(m.data) for m in (big, small))
    wire_len += 8 * sum(-(-(10 + len(m.data)) // MAX_SEND_PAYLOAD) for m in (big, small))
    with trio.fail_after(GUARD):
        async with trio.open_nursery() as nursery:
            second = channel.send_message_nowait(encode_header(small), small.data)
            assert second is not None, "the trunk is taken by the first write's rest"
            nursery.start_soon(second)
            nursery.start_soon(rest)
            frames = await _read_frames(peer, wire_len)
    got = list(MessageDecoder().feed(b"".join(payload for _, payload in frames)))
    assert got == [big, small]


async def test_a_synchronous_write_that_fits_is_done_at_once() -> None:
    ours, peer = socket_pair()
    mux = Mux(ours)
    msg = _message(1, 100)
    with trio.testing.assert_no_checkpoints():
        assert mux.channel(1).send_message_nowait(encode_header(msg), msg.data) is None
    with trio.fail_after(GUARD):
        frames = await _read_frames(peer, 8 + 10 + 100)
    assert list(MessageDecoder().feed(frames[0][1])) == [msg]


async def test_a_synchronous_write_on_a_closed_socket_is_a_lost_connection() -> None:
    ours, peer = socket_pair()
    mux = Mux(ours)
    await peer.aclose()
    msg = _message(1, 100)
    with pytest.raises(ConnectionLost):
        for _ in range(3):  # the first write may still land in the buffer
            mux.channel(1).send_message_nowait(encode_header(msg), msg.data)
