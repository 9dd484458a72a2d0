"""The mux at its edges: partial and maximal frames, how the trunk ends, closing while
cancelled (written to kill the mutants `nox -s mutation` found surviving in nri/mux.py), and
how long a begun frame or message may wait for its rest."""

from __future__ import annotations

import os
import struct

import pytest
import trio
import trio.testing
from trio.testing import MockClock

from nri_resmgr.nri.errors import ConnectionLost, ProtocolError
from nri_resmgr.nri.mux import (
    INCOMPLETE_TIMEOUT,
    MAX_RECV_PAYLOAD,
    PLUGIN_SERVICE_CONN,
    FrameDecoder,
    Mux,
    encode_frames,
)
from nri_resmgr.nri.ttrpc_codec import MSG_REQUEST, Message, MessageDecoder
from tests.nri.helpers import socket_pair

GUARD = 10  # a hang guard only


def header(conn: int, length: int) -> bytes:
    return struct.pack(">II", conn, length)


def test_a_frame_waits_for_its_whole_payload() -> None:
    decoder = FrameDecoder([1])
    assert list(decoder.feed(header(1, 100) + b"x" * 10)) == []
    assert decoder.pending() == 18
    assert list(decoder.feed(b"y" * 90)) == [(1, b"x" * 10 + b"y" * 90)]
    assert decoder.pending() == 0


def test_the_largest_frame_is_accepted_and_one_byte_more_refused() -> None:
    decoder = FrameDecoder([1])
    assert list(decoder.feed(header(1, MAX_RECV_PAYLOAD))) == []  # waits for the payload
    with pytest.raises(ProtocolError, match=f"exceeds the maximum of {MAX_RECV_PAYLOAD}"):
        list(FrameDecoder([1]).feed(header(1, MAX_RECV_PAYLOAD + 1)))


async def _run_until_it_ends(mux: Mux) -> BaseException:
    with trio.fail_after(GUARD):
        try:
            await mux.run()
        except (ConnectionLost, ProtocolError) as exc:
            return exc
    raise AssertionError("Mux.run returned without an error")


async def test_a_clean_close_by_the_peer_is_a_lost_connection_and_ends_the_channels() -> None:
    ours, peer = socket_pair()
    mux = Mux(ours)
    await peer.aclose()
    exc = await _run_until_it_ends(mux)
    assert isinstance(exc, ConnectionLost)
    assert str(exc) == "NRI socket closed by the peer"
    with trio.fail_after(GUARD):
        await mux.channel(PLUGIN_SERVICE_CONN).wait_closed()


async def test_a_close_in_the_middle_of_a_frame_is_a_protocol_error() -> None:
    ours, peer = socket_pair()
    mux = Mux(ours)
    await peer.send_all(header(1, 10) + b"abc")
    await peer.aclose()
    exc = await _run_until_it_ends(mux)
    assert isinstance(exc, ProtocolError)
    assert str(exc) == "NRI socket closed in the middle of a mux frame"


async def test_read_and_write_failures_name_the_direction() -> None:
    ours, _peer = socket_pair()
    mux = Mux(ours)
    await ours.aclose()
    exc = await _run_until_it_ends(mux)
    assert isinstance(exc, ConnectionLost)
    assert str(exc).startswith("NRI socket read failed: ")
    with pytest.raises(ConnectionLost, match=r"^NRI socket write failed: "):
        await mux.send(PLUGIN_SERVICE_CONN, b"data")


async def test_aclose_in_a_cancelled_scope_still_closes_and_returns() -> None:
    ours, peer = socket_pair()
    mux = Mux(ours)
    returned = False
    with trio.CancelScope() as scope:
        scope.cancel()
        await mux.aclose()
        returned = True  # shielded: the cancel does not interrupt the close
    assert returned
    with trio.fail_after(GUARD):
        assert await peer.receive_some() == b""


# -- a begun frame or message must end within INCOMPLETE_TIMEOUT (virtual time) ------------


class _Reader:
    """The mux's reader, run in the background; ``ended`` is what it raised."""

    def __init__(self, mux: Mux) -> None:
        self.mux = mux
        self.ended: BaseException | None = None

    async def run(self) -> None:
        try:
            await self.mux.run()
        except (ConnectionLost, ProtocolError) as exc:
            self.ended = exc


def _holding_listener(mux: Mux) -> MessageDecoder:
    """A listener on connection 1 that holds what is not yet a whole ttrpc message."""
    decoder = MessageDecoder()

    def on_data(data: bytes) -> int:
        list(decoder.feed(data))
        return decoder.pending()

    mux.channel(PLUGIN_SERVICE_CONN).listen(on_data)
    return decoder


def _ttrpc(length: int) -> bytes:
    return struct.pack(">IIBB", length, 1, MSG_REQUEST, 0)


async def _after(clock: MockClock, seconds: float) -> None:
    """Let ``seconds`` pass and everything that wakes up then run."""
    await trio.testing.wait_all_tasks_blocked()
    clock.jump(seconds)
    await trio.testing.wait_all_tasks_blocked()


async def test_a_mux_frame_whose_rest_never_comes_ends_the_trunk_at_the_bound(
    mock_clock: MockClock,
) -> None:
    ours, peer = socket_pair()
    reader = _Reader(Mux(ours))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader.run)
        await peer.send_all(header(1, 100) + b"abc")
        await _after(mock_clock, INCOMPLETE_TIMEOUT - 0.1)
        assert reader.ended is None, "still within the bound"
        await _after(mock_clock, 0.2)
    assert isinstance(reader.ended, ProtocolError)
    assert str(reader.ended) == (
        f"the NRI peer sent 11 bytes of a mux frame and nothing more for "
        f"{INCOMPLETE_TIMEOUT:g} s: closing the connection"
    )


async def test_a_ttrpc_message_whose_rest_never_comes_ends_the_trunk_at_the_bound(
    mock_clock: MockClock,
) -> None:
    ours, peer = socket_pair()
    mux = Mux(ours)
    _holding_listener(mux)
    reader = _Reader(mux)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader.run)
        await peer.send_all(encode_frames(1, _ttrpc(100) + b"abc"))  # the frame is whole
        await _after(mock_clock, INCOMPLETE_TIMEOUT / 2)
        # Whole frames that do not finish the message are no progress.
        await peer.send_all(encode_frames(1, b"more"))
        await _after(mock_clock, INCOMPLETE_TIMEOUT / 2 + 0.1)
    assert isinstance(reader.ended, ProtocolError)
    assert str(reader.ended) == (
        f"the NRI peer sent 17 bytes of a ttrpc message on connection 1 and nothing more "
        f"for {INCOMPLETE_TIMEOUT:g} s: closing the connection"
    )


async def test_messages_that_each_end_within_the_bound_are_never_cut(
    mock_clock: MockClock,
) -> None:
    """Each read ends inside a frame and inside a message, for many bounds in a row, yet
    each frame and message ends within the bound of its own start."""
    ours, peer = socket_pair()
    mux = Mux(ours)
    decoder = _holding_listener(mux)
    reader = _Reader(mux)
    message = encode_frames(1, _ttrpc(6) + b"body..")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader.run)
        await peer.send_all(message[:5])
        for _ in range(5):
            await _after(mock_clock, INCOMPLETE_TIMEOUT * 0.8)
            await peer.send_all(message[5:] + message[:5])
        await _after(mock_clock, INCOMPLETE_TIMEOUT * 0.8)
        assert reader.ended is None
        assert decoder.pending() == 0  # the five messages came whole
        nursery.cancel_scope.cancel()


async def test_a_rest_that_came_while_an_answer_kept_the_reader_busy_still_counts(
    mock_clock: MockClock,
) -> None:
    """The bound is on the peer, not on us. Connection 2 holds half a message; a request
    on connection 1 is answered in place, in the reader's task, for longer than the bound,
    and meanwhile the rest of connection 2's message comes: it is taken, not refused."""
    ours, peer = socket_pair()
    mux = Mux(ours)
    held = MessageDecoder()
    whole: list[Message] = []

    def on_runtime_conn(data: bytes) -> int:
        whole.extend(held.feed(data))
        return held.pending()

    def on_plugin_conn(data: bytes) -> int:
        # A long answer given in place: the rest arrives and time passes meanwhile.
        os.write(peer.socket.fileno(), encode_frames(2, b"def"))
        mock_clock.jump(INCOMPLETE_TIMEOUT * 2)
        return 0

    mux.channel(2).listen(on_runtime_conn)
    mux.channel(PLUGIN_SERVICE_CONN).listen(on_plugin_conn)
    reader = _Reader(mux)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader.run)
        await peer.send_all(encode_frames(2, _ttrpc(6) + b"abc"))
        await _after(mock_clock, 1)
        await peer.send_all(encode_frames(1, b"request"))
        await trio.testing.wait_all_tasks_blocked()
        assert reader.ended is None
        assert [m.data for m in whole] == [b"abcdef"]
        nursery.cancel_scope.cancel()
