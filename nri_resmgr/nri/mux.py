"""The NRI connection multiplexer: several logical byte streams over one unix socket.

Every write is a frame ``conn id (u32 BE) | length (u32 BE) | payload``. A Go peer reads
frame payloads into a 4096-byte buffer and fails on larger ones, so we never send more than
4096 payload bytes per frame; incoming frames may be any size up to one whole ttrpc message
and are reassembled into a plain byte stream per connection.
"""

from __future__ import annotations

import logging
import math
import struct
from collections.abc import Iterable, Iterator

import trio

from nri_resmgr.nri.errors import ConnectionLost, ProtocolError
from nri_resmgr.nri.writelock import WriteLock

log = logging.getLogger(__name__)

PLUGIN_SERVICE_CONN = 1
RUNTIME_SERVICE_CONN = 2
HEADER_LEN = 8
MAX_SEND_PAYLOAD = 4096
# The Go writer puts a whole ttrpc message (10-byte header + 4 MiB) into one frame.
MAX_RECV_PAYLOAD = 10 + (4 << 20)
_HEADER = struct.Struct(">II")
_RECV_CHUNK = 65536


def encode_frames(conn_id: int, data: bytes) -> bytes:
    """The frames carrying ``data`` on ``conn_id``, each with at most 4096 payload bytes."""
    out = bytearray()
    view = memoryview(data)
    for start in range(0, len(data), MAX_SEND_PAYLOAD):
        chunk = view[start : start + MAX_SEND_PAYLOAD]
        out += _HEADER.pack(conn_id, len(chunk))
        out += chunk
    return bytes(out)


class FrameDecoder:
    """Splits the trunk byte stream into ``(conn id, payload)`` frames, refusing bad ones."""

    def __init__(self, known_conns: Iterable[int]) -> None:
        self._known = frozenset(known_conns)
        self._buf = bytearray()

    def feed(self, data: bytes | bytearray) -> Iterator[tuple[int, bytes]]:
        self._buf += data
        while len(self._buf) >= HEADER_LEN:
            conn_id, length = _HEADER.unpack_from(self._buf)
            if conn_id not in self._known:
                raise ProtocolError(f"mux frame for unknown connection id {conn_id}")
            if length > MAX_RECV_PAYLOAD:
                raise ProtocolError(
                    f"mux frame of {length} bytes on connection {conn_id} "
                    f"exceeds the maximum of {MAX_RECV_PAYLOAD}"
                )
            if len(self._buf) < HEADER_LEN + length:
                return
            payload = bytes(self._buf[HEADER_LEN : HEADER_LEN + length])
            del self._buf[: HEADER_LEN + length]
            yield conn_id, payload

    def pending(self) -> int:
        """Bytes of an incomplete frame still waiting for the rest."""
        return len(self._buf)


class MuxChannel:
    """One logical connection: a byte stream whose writes are framed onto the trunk."""

    def __init__(self, mux: Mux, conn_id: int) -> None:
        self.conn_id = conn_id
        self._mux = mux
        # Unbounded on purpose: each consumer reads continuously, and blocking the trunk
        # reader on one channel could starve the other channel it is waiting on.
        self._send, self._recv = trio.open_memory_channel[bytes](math.inf)

    async def send_all(self, data: bytes) -> None:
        await self._mux.send(self.conn_id, data)

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """The next chunk of the stream; ``b""`` once the trunk is closed."""
        try:
            return await self._recv.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            return b""

    def _deliver(self, payload: bytes) -> None:
        if payload:
            self._send.send_nowait(payload)

    def _close(self) -> None:
        self._send.close()


class Mux:
    """The trunk: one reader task (``run``) feeding channels 1 and 2, and a framed writer."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self._stream = stream
        self._send_lock = WriteLock()
        self._channels = {
            cid: MuxChannel(self, cid) for cid in (PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN)
        }
        self._decoder = FrameDecoder(self._channels)

    def channel(self, conn_id: int) -> MuxChannel:
        return self._channels[conn_id]

    async def send(self, conn_id: int, data: bytes) -> None:
        # One send_all per message keeps its frames contiguous and our writes un-interleaved.
        frames = encode_frames(conn_id, data)
        async with self._send_lock:
            try:
                await self._stream.send_all(frames)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                raise ConnectionLost(f"NRI socket write failed: {exc}") from exc

    async def send_raw(self, data: bytes) -> None:
        """Write bytes to the trunk unframed (test peers use it to send broken frames)."""
        async with self._send_lock:
            await self._stream.send_all(data)

    async def run(self) -> None:
        """Read the trunk until it closes; raises ``ConnectionLost`` or ``ProtocolError``."""
        try:
            await self._read_loop()
        finally:
            for chan in self._channels.values():
                chan._close()

    async def _read_loop(self) -> None:
        while True:
            try:
                data = await self._stream.receive_some(_RECV_CHUNK)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                raise ConnectionLost(f"NRI socket read failed: {exc}") from exc
            if not data:
                if self._decoder.pending():
                    raise ProtocolError("NRI socket closed in the middle of a mux frame")
                raise ConnectionLost("NRI socket closed by the peer")
            for conn_id, payload in self._decoder.feed(data):
                self._channels[conn_id]._deliver(payload)

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await self._stream.aclose()
