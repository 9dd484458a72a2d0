"""The NRI connection multiplexer: several logical byte streams over one unix socket.

Every write is a frame ``conn id (u32 BE) | length (u32 BE) | payload``. A Go peer reads
frame payloads into a 4096-byte buffer and fails on larger ones, so we never send more than
4096 payload bytes per frame; incoming frames may be any size up to one whole ttrpc message
and are reassembled into a plain byte stream per connection.

On a real socket the trunk is written and read straight through its file descriptor (see
``_FdTrunk``): a reply is one ``write`` that needs no trip through trio's scheduler, and
reading waits for readability first, so a request costs one ``read`` instead of a read and
a read that fails with EAGAIN. Other streams (trio's in-memory ones in tests) go through
``send_all``/``receive_some`` as before.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import struct
from collections.abc import Awaitable, Callable, Iterable, Iterator
from functools import partial

import trio

from nri_resmgr.nri import afterreply
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
# Reads in a row that found data without waiting, before the read loop yields anyway: a
# flood of input must not starve the handlers it wakes.
_READS_BEFORE_YIELD = 16

Rest = Callable[[], Awaitable[None]]
"""What a write that could not finish at once still has to do, to run in a task."""


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
        self._listener: Callable[[bytes], None] | None = None
        self._closed = trio.Event()

    async def send_all(self, data: bytes) -> None:
        await self._mux.send(self.conn_id, data)

    async def send_message(self, header: bytes, body: bytes) -> None:
        """Send one ttrpc message (its header, then its body) as one trunk write."""
        if len(header) + len(body) <= MAX_SEND_PAYLOAD:
            # The common case, one frame: both headers and the body in a single buffer.
            frame = _HEADER.pack(self.conn_id, len(header) + len(body)) + header + body
            await self._mux.send_frames(frame)
        else:
            await self._mux.send(self.conn_id, header + body)

    def send_message_nowait(self, header: bytes, body: bytes) -> Rest | None:
        """``send_message`` without yielding when the socket takes it all at once (None);
        otherwise the rest of the write, which the caller must run in a task."""
        if len(header) + len(body) <= MAX_SEND_PAYLOAD:
            frame = _HEADER.pack(self.conn_id, len(header) + len(body)) + header + body
            return self._mux.send_frames_nowait(frame)
        return self._mux.send_frames_nowait(encode_frames(self.conn_id, header + body))

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """The next chunk of the stream; ``b""`` once the trunk is closed."""
        try:
            return await self._recv.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            return b""

    def listen(self, on_data: Callable[[bytes], None]) -> None:
        """From now on call ``on_data`` with each payload, in the trunk reader's task, instead
        of queueing it for ``receive_some``. Payloads queued before are handed over first."""
        while True:
            try:
                on_data(self._recv.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel):
                break
        self._listener = on_data

    async def wait_closed(self) -> None:
        """Return once the trunk is closed (after the last payload was delivered)."""
        await self._closed.wait()

    def _deliver(self, payload: bytes) -> None:
        if not payload:
            return
        if self._listener is not None:
            self._listener(payload)
        else:
            self._send.send_nowait(payload)

    def _close(self) -> None:
        self._send.close()
        self._closed.set()


class Mux:
    """The trunk: one reader task (``run``) feeding channels 1 and 2, and a framed writer."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self._stream = stream
        self._fd = _FdTrunk.of(stream)
        self._send_lock = WriteLock()
        self._channels = {
            cid: MuxChannel(self, cid) for cid in (PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN)
        }
        self._decoder = FrameDecoder(self._channels)

    def channel(self, conn_id: int) -> MuxChannel:
        return self._channels[conn_id]

    async def send(self, conn_id: int, data: bytes) -> None:
        await self.send_frames(encode_frames(conn_id, data))

    async def send_frames(self, frames: bytes) -> None:
        """Write whole frames; one call per message keeps its frames contiguous and our
        writes un-interleaved."""
        try:
            if self._fd is not None and not self._send_lock.locked():
                # Nobody is mid-write: try it at once. Most replies fit the socket buffer,
                # so this is the whole send, and it does not yield (the handler that called
                # it is about to end anyway).
                sent = self._fd.write_nowait(frames)
                if sent == len(frames):
                    return
                frames = frames[sent:]
            async with self._send_lock:
                await self._stream.send_all(frames)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise ConnectionLost(f"NRI socket write failed: {exc}") from exc

    def send_frames_nowait(self, frames: bytes) -> Rest | None:
        """Write whole frames from synchronous code (a request answered in the reader task).

        None: all written. Otherwise the call that sends the rest, to be run in a task; the
        send lock is then already held for it (taken here, so no other write can come in
        between), or, when someone else is mid-write or there is no fd, it is a plain
        ``send_frames``. Only a connection that is ending may leave the rest unsent."""
        if self._fd is None or not self._send_lock.acquire_nowait():
            return partial(self.send_frames, frames)
        try:
            sent = self._fd.write_nowait(frames)
        except (trio.ClosedResourceError, OSError) as exc:
            self._send_lock.release()
            raise ConnectionLost(f"NRI socket write failed: {exc}") from exc
        if sent == len(frames):
            self._send_lock.release()
            return None
        return partial(self._send_held, frames[sent:])

    async def _send_held(self, frames: bytes) -> None:
        """The rest of a ``send_frames_nowait``, whose caller took the send lock for us."""
        try:
            await self._stream.send_all(frames)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise ConnectionLost(f"NRI socket write failed: {exc}") from exc
        finally:
            self._send_lock.release()

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
            data: bytes | bytearray
            try:
                if self._fd is not None:
                    data = await self._fd.read()
                else:
                    data = await self._stream.receive_some(_RECV_CHUNK)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                raise ConnectionLost(f"NRI socket read failed: {exc}") from exc
            if not data:
                if self._decoder.pending():
                    raise ProtocolError("NRI socket closed in the middle of a mux frame")
                raise ConnectionLost("NRI socket closed by the peer")
            after = afterreply.CURRENT
            if after is None:
                self._deliver(data)
                continue
            after.begin_batch()
            try:
                self._deliver(data)
            finally:
                after.end_batch()

    def _deliver(self, data: bytes | bytearray) -> None:
        for conn_id, payload in self._decoder.feed(data):
            self._channels[conn_id]._deliver(payload)

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await self._stream.aclose()


class _FdTrunk:
    """The trunk socket's file descriptor, read and written without trio's stream wrapper.

    trio's ``SocketStream.send_all`` always ends in a scheduler trip, and its
    ``receive_some`` tries the read before waiting, which on an idle NRI connection always
    fails with EAGAIN first. Here a write is tried directly (the caller falls back to
    ``send_all`` for what did not fit), and a read waits for readability unless the last
    read found data. The stream still owns the socket: closing it wakes a waiting read
    with ``ClosedResourceError``.
    """

    def __init__(self, sock: trio.socket.SocketType) -> None:
        self._sock = sock
        self._ready_reads = 0

    @classmethod
    def of(cls, stream: trio.abc.Stream) -> _FdTrunk | None:
        if isinstance(stream, trio.SocketStream):
            return cls(stream.socket)
        return None

    @property
    def _fd(self) -> int:
        # Asked each time, never kept: once the socket is closed its number may be reused.
        fd = self._sock.fileno()
        if fd < 0:
            raise trio.ClosedResourceError("the NRI socket was closed")
        return fd

    def write_nowait(self, data: bytes) -> int:
        """Bytes written at once, 0 if the socket buffer is full."""
        try:
            return os.write(self._fd, data)
        except BlockingIOError:
            return 0

    async def read(self) -> bytes:
        """The next bytes, ``b""`` at the end; always a checkpoint when there is nothing
        to read yet, and at least every ``_READS_BEFORE_YIELD`` reads."""
        if self._ready_reads >= _READS_BEFORE_YIELD:
            self._ready_reads = 0
            await trio.lowlevel.checkpoint()
        while True:
            if self._ready_reads == 0:
                await trio.lowlevel.wait_readable(self._fd)
            try:
                data = os.read(self._fd, _RECV_CHUNK)
            except BlockingIOError:
                self._ready_reads = 0
                continue
            except OSError as exc:
                if exc.errno == errno.EBADF:
                    raise trio.ClosedResourceError("the NRI socket was closed") from exc
                raise
            # A full chunk means more may be waiting: read again before waiting.
            self._ready_reads = self._ready_reads + 1 if len(data) == _RECV_CHUNK else 0
            return data
