"""Bad input on the NRI socket: fuzzed trunks through the decoders and through a live session.

tests/nri/test_codec.py has the per-codec properties (round trips, raw bytes into each decoder
alone); these go further: recipes that reach the envelope and payload decoders, the decoders
chained as the daemon chains them, a real ``PluginSession`` fed garbage over a socket, and
the allocation bound on oversized length fields.
"""

from __future__ import annotations

import contextlib
import random
import socket
import struct
import tracemalloc
from collections.abc import Callable

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_resmgr.nri.errors import ConnectionLost, ProtocolError, RpcError
from nri_resmgr.nri.mux import MAX_RECV_PAYLOAD, PLUGIN_SERVICE_CONN, encode_frames
from nri_resmgr.nri.stub import PluginSession
from nri_resmgr.nri.ttrpc_codec import MAX_MESSAGE_LEN, MSG_REQUEST
from tests.nri.helpers import make_manager
from tests.reliability.fuzz_target import (
    CHUNKS,
    EXPECTED,
    METHODS,
    PAYLOADS,
    Depth,
    decode_trunk,
    one_input,
    trunk_from_recipe,
)

# What NriService catches and re-dials after; anything else would take the daemon down.
SESSION_ENDINGS = (ConnectionLost, ProtocolError, RpcError)
# Far below any buffer sized from an announced length (4 GiB, 4 MiB).
ALLOCATION_BOUND = 256 << 10
GUARD = 10  # hang guard only


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=800))
def test_recipes_through_the_chained_decoders_raise_only_protocol_errors(recipe: bytes) -> None:
    one_input(recipe)  # raises whatever unexpected escapes


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=3000), st.sampled_from(CHUNKS))
def test_raw_bytes_through_the_chained_decoders(data: bytes, chunk: int) -> None:
    with contextlib.suppress(*EXPECTED):
        decode_trunk(data, chunk)


@pytest.mark.parametrize("method", sorted(PAYLOADS))
@settings(max_examples=60, deadline=None)
@given(cut=st.integers(0, 400), junk=st.binary(max_size=16))
def test_truncated_and_spliced_payloads_fail_as_wire_errors(
    method: str, cut: int, junk: bytes
) -> None:
    valid, decode = PAYLOADS[method]
    data = valid[: cut % (len(valid) + 1)] + junk
    with contextlib.suppress(*EXPECTED):
        decode(data)


def test_the_recipes_reach_the_payload_decoders() -> None:
    # Guards the fuzz target itself: a recipe language that never got past the mux header
    # would make every test above pass vacuously.
    empty_create = bytes([CHUNKS.index(65536), 5, 1, METHODS.index("CreateContainer"), 0])
    one = Depth()
    data, chunk = trunk_from_recipe(empty_create + bytes(4))
    decode_trunk(data, chunk, one)
    assert (one.messages, one.payloads) == (1, 1)
    rng = random.Random(8)
    depth = Depth()
    for _ in range(2000):
        one_input(rng.randbytes(rng.randrange(1, 300)), depth)
    assert depth.payloads > 1000, f"2000 random recipes reached the payload decoders {depth}"


def peak_allocation(fn: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def expect_protocol_error(data: bytes) -> Callable[[], None]:
    def run() -> None:
        with pytest.raises(ProtocolError, match="exceeds the maximum"):
            decode_trunk(data, len(data))

    return run


def test_a_mux_header_announcing_4_gib_is_refused_before_allocating() -> None:
    data = struct.pack(">II", PLUGIN_SERVICE_CONN, 0xFFFFFFFF) + b"x" * 100
    assert peak_allocation(expect_protocol_error(data)) < ALLOCATION_BOUND


def test_a_ttrpc_header_announcing_4_gib_is_refused_before_allocating() -> None:
    message = struct.pack(">IIBB", 0xFFFFFFFF, 1, MSG_REQUEST, 0) + b"x" * 100
    data = encode_frames(PLUGIN_SERVICE_CONN, message)
    assert peak_allocation(expect_protocol_error(data)) < ALLOCATION_BOUND


def test_the_largest_allowed_announcement_buffers_only_what_arrived() -> None:
    # The maximum announced, 100 bytes sent: nothing may be sized from the announcement.
    frame = struct.pack(">II", PLUGIN_SERVICE_CONN, MAX_RECV_PAYLOAD) + b"x" * 100
    message = struct.pack(">IIBB", MAX_MESSAGE_LEN, 1, MSG_REQUEST, 0) + b"x" * 100
    in_frames = encode_frames(PLUGIN_SERVICE_CONN, message)
    assert peak_allocation(lambda: decode_trunk(frame, 7)) < ALLOCATION_BOUND
    assert peak_allocation(lambda: decode_trunk(in_frames, 7)) < ALLOCATION_BOUND


async def session_outcome(data: bytes, chunk: int) -> BaseException | None:
    """Run a real plugin session, feed it ``data`` in ``chunk``s, close; how did it end?"""
    ours, theirs = socket.socketpair()
    peer = trio.SocketStream(trio.socket.from_stdlib_socket(theirs))
    session = PluginSession(make_manager(), trio.SocketStream(trio.socket.from_stdlib_socket(ours)),
                            "resmgr", "90")  # fmt: skip
    outcome: list[BaseException | None] = []

    async def run_session() -> None:
        try:
            await session.run()
            outcome.append(None)
        except BaseException as exc:  # judged by the caller, whatever it is
            outcome.append(exc)

    async def drain() -> None:
        # Read what the session writes (RegisterPlugin, error replies) so it never blocks.
        try:
            while await peer.receive_some(65536):
                pass
        except trio.BrokenResourceError:
            pass

    with trio.fail_after(GUARD):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_session)
            nursery.start_soon(drain)
            try:
                for start in range(0, len(data), chunk):
                    await peer.send_all(data[start : start + chunk])
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # the session hung up on us: fine, that is a way to refuse
            await peer.send_eof()
            while not outcome:
                await trio.sleep(0.001)
            nursery.cancel_scope.cancel()
    await peer.aclose()
    return outcome[0]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.binary(max_size=600))
async def test_a_live_session_fed_garbage_ends_only_with_errors_the_service_retries(
    recipe: bytes,
) -> None:
    data, chunk = trunk_from_recipe(recipe)
    ending = await session_outcome(data, chunk)
    assert isinstance(ending, SESSION_ENDINGS), repr(ending)


async def test_a_live_session_refuses_a_4_gib_frame_without_allocating_it() -> None:
    data = struct.pack(">II", PLUGIN_SERVICE_CONN, 0xFFFFFFFF) + b"x" * 4096
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        ending = await session_outcome(data, len(data))
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert isinstance(ending, ProtocolError) and "exceeds the maximum" in str(ending)
    assert peak < 4 << 20
