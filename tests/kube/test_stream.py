"""Watch bodies in gzip of many members (kube-apiserver 1.37's watch-list replies: one member
per flush), decoded whole however the chunks fall; through the client, against a fake server
that compresses as 1.37 does (tests/kube/test_watch_list_apiserver.py: the real one)."""

from __future__ import annotations

import gzip
import itertools
from collections.abc import AsyncIterator, Callable

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from nri_resmgr.kube import EventType
from nri_resmgr.kube.errors import BadResponse
from nri_resmgr.kube.stream import GzipMembers, decoder_for, lines
from tests.kube.conftest import ServeFake
from tests.kube.fakeserver import Reply, event_line
from tests.kube.test_watch import Script, cm
from tests.kube.test_watch_list import collect, end_of_initial_events


def cut(data: bytes, points: list[int]) -> list[bytes]:
    """``data`` in pieces cut at ``points`` (positions, in any order, repeats allowed)."""
    edges = [0, *sorted({p % (len(data) + 1) for p in points}), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


@given(
    st.lists(st.binary(max_size=300), min_size=1, max_size=8),
    st.lists(st.integers(min_value=0), max_size=20),
)
def test_every_gzip_member_is_decoded_however_the_chunks_fall(
    members: list[bytes], points: list[int]
) -> None:
    body = b"".join(gzip.compress(m, compresslevel=1) for m in members)
    decoder = GzipMembers()
    assert b"".join(decoder.decode(piece) for piece in cut(body, points)) == b"".join(members)


def test_a_corrupt_member_is_a_recoverable_bad_response() -> None:
    body = gzip.compress(b"first\n") + b"not gzip at all"
    with pytest.raises(BadResponse, match="gzip stream is corrupt"):
        GzipMembers().decode(body)


def test_only_gzip_and_no_coding_are_decoded_here() -> None:
    assert decoder_for("identity") is not None and decoder_for("") is not None
    assert decoder_for(" GZIP ") is not None
    assert decoder_for("br") is None  # left to httpx


async def read_lines(pieces: list[bytes], decode: Callable[[bytes], bytes]) -> list[str]:
    async def chunks() -> AsyncIterator[bytes]:
        for piece in pieces:
            yield piece

    return [line async for line in lines(chunks(), decode)]


async def test_lines_span_chunks_and_members_and_a_last_unended_line_is_kept() -> None:
    body = gzip.compress(b'{"a"') + gzip.compress(b': 1}\r\n{}\n\n{"cut') + gzip.compress(b"")
    decoded = await read_lines(cut(body, [3, 17, 30, 31]), GzipMembers().decode)
    assert decoded == ['{"a": 1}', "{}", "", '{"cut']


def in_members(lines_: list[bytes]) -> AsyncIterator[bytes]:
    """A stream as kube-apiserver 1.37 writes a watch-list's: the initial state and its
    bookmark in one gzip member, then one member per event, each sent as it happens."""

    async def play() -> AsyncIterator[bytes]:
        ends = next(i for i, line in enumerate(lines_) if b"initial-events-end" in line) + 1
        yield gzip.compress(b"".join(lines_[:ends]), compresslevel=1)
        for line in lines_[ends:]:
            await trio.sleep(0.01)
            yield gzip.compress(line, compresslevel=1)
        await trio.sleep_forever()

    return play()


async def test_a_watch_hears_every_event_after_a_compressed_initial_state(
    serve_fake: ServeFake,
) -> None:
    stream = in_members([event_line("ADDED", cm("a", "7")), end_of_initial_events("12"),
                         event_line("MODIFIED", cm("a", "13")),
                         event_line("DELETED", cm("a", "14"))])  # fmt: skip
    gzipped = Reply(stream=stream, headers=(("Content-Encoding", "gzip"),))
    script = Script(lists=[], watches=[[gzipped]])
    server, client = await serve_fake(script.handle)
    with trio.fail_after(30):  # before the fix only the RESET came: httpx read one member
        reset, modified, deleted = await collect(client, 3)

    assert [o["metadata"]["name"] for o in reset.objects] == ["a"]
    assert (modified.type, modified.resource_version) == (EventType.MODIFIED, "13")
    assert (deleted.type, deleted.resource_version) == (EventType.DELETED, "14")
    [request] = server.requests  # the same one request: nothing asked again
    assert request.headers["accept-encoding"] == "gzip"
