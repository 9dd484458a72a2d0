"""The mux at its edges: partial and maximal frames, how the trunk ends, closing while
cancelled. (Written to kill the mutants `nox -s mutation` found surviving in nri/mux.py.)"""

from __future__ import annotations

import struct

import pytest
import trio
import trio.testing

from nri_resmgr.nri.errors import ConnectionLost, ProtocolError
from nri_resmgr.nri.mux import (
    MAX_RECV_PAYLOAD,
    PLUGIN_SERVICE_CONN,
    FrameDecoder,
    Mux,
)

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
    ours, peer = trio.testing.memory_stream_pair()
    mux = Mux(ours)
    await peer.aclose()
    exc = await _run_until_it_ends(mux)
    assert isinstance(exc, ConnectionLost)
    assert str(exc) == "NRI socket closed by the peer"
    assert await mux.channel(PLUGIN_SERVICE_CONN).receive_some() == b""


async def test_a_close_in_the_middle_of_a_frame_is_a_protocol_error() -> None:
    ours, peer = trio.testing.memory_stream_pair()
    mux = Mux(ours)
    await peer.send_all(header(1, 10) + b"abc")
    await peer.aclose()
    exc = await _run_until_it_ends(mux)
    assert isinstance(exc, ProtocolError)
    assert str(exc) == "NRI socket closed in the middle of a mux frame"


async def test_read_and_write_failures_name_the_direction() -> None:
    ours, _peer = trio.testing.memory_stream_pair()
    mux = Mux(ours)
    await ours.aclose()
    exc = await _run_until_it_ends(mux)
    assert isinstance(exc, ConnectionLost)
    assert str(exc).startswith("NRI socket read failed: ")
    with pytest.raises(ConnectionLost, match=r"^NRI socket write failed: "):
        await mux.send(PLUGIN_SERVICE_CONN, b"data")


async def test_aclose_in_a_cancelled_scope_still_closes_and_returns() -> None:
    ours, peer = trio.testing.memory_stream_pair()
    mux = Mux(ours)
    returned = False
    with trio.CancelScope() as scope:
        scope.cancel()
        await mux.aclose()
        returned = True  # shielded: the cancel does not interrupt the close
    assert returned
    with trio.fail_after(GUARD):
        assert await peer.receive_some() == b""
