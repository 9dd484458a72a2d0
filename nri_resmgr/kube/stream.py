"""The lines of a streamed reply (a watch), whose body may be gzip in many members.

From Kubernetes 1.37 (feature WatchListCompression, beta, on by default) kube-apiserver
compresses the reply to a watch that asks for its initial state (``sendInitialEvents``) when
the client accepts gzip, and ends the gzip stream at every flush: the initial state comes as
one gzip member, and each later event as a member of its own. RFC 1952 allows a body of many
members, and Go's gzip reader (client-go's) reads them all; httpx's decoder stops after the
first and drops the rest without an error, so a watch read through it hears nothing after its
initial state until the request ends. Stream bodies are decoded here instead, member after
member.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Callable

from nri_resmgr.kube.errors import BadResponse

GZIP_WBITS = zlib.MAX_WBITS | 16
"""zlib's window bits for a gzip header and trailer around the deflate data."""


class GzipMembers:
    """Decodes a gzip body of one member or many, fed in chunks cut anywhere."""

    def __init__(self) -> None:
        self._member = zlib.decompressobj(GZIP_WBITS)

    def decode(self, data: bytes) -> bytes:
        out: list[bytes] = []
        while data:
            try:
                out.append(self._member.decompress(data))
            except zlib.error as exc:
                # Recoverable: the watch resumes from the last event it could read.
                raise BadResponse(0, "BadResponse", f"gzip stream is corrupt: {exc}") from exc
            if not self._member.eof:
                break
            # The member ended; what followed it starts the next one.
            data = self._member.unused_data
            self._member = zlib.decompressobj(GZIP_WBITS)
        return b"".join(out)


def _identity(data: bytes) -> bytes:
    return data


def decoder_for(content_encoding: str) -> Callable[[bytes], bytes] | None:
    """The body decoder for a reply's Content-Encoding; None for one not handled here."""
    encoding = content_encoding.strip().lower()
    if encoding == "gzip":
        return GzipMembers().decode
    if encoding in ("", "identity"):
        return _identity
    return None


async def lines(
    chunks: AsyncIterator[bytes], decode: Callable[[bytes], bytes]
) -> AsyncIterator[str]:
    """The newline-ended lines of a body read as raw ``chunks``; a last unended one too (a cut
    event, which the watch then reads as malformed)."""
    pending: list[bytes] = []  # the pieces of a line not ended yet (one event may be long)
    async for chunk in chunks:
        first, *rest = decode(chunk).split(b"\n")
        pending.append(first)
        if not rest:
            continue
        yield _text(b"".join(pending))
        for line in rest[:-1]:
            yield _text(line)
        pending = [rest[-1]]
    if last := b"".join(pending):
        yield _text(last)


def _text(line: bytes) -> str:
    # A newline byte is never part of a UTF-8 sequence, so splitting before decoding is safe.
    return line.rstrip(b"\r").decode("utf-8", errors="replace")
