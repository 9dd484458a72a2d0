"""The NRI connection multiplexer: several logical byte streams over one unix socket.

Every write is a frame ``conn id (u32 BE) | length (u32 BE) | payload``. A Go peer reads
frame payloads into a 4096-byte buffer and fails on larger ones, so we never send more than
4096 payload bytes per frame; incoming frames may be any size up to one whole ttrpc message
and are reassembled into a plain byte stream per connection.

The trunk is a unix stream socket, written and read straight through its file descriptor
(``FdTrunk``): a reply is one ``write`` that needs no trip through trio's scheduler, and
reading waits for readability first, so a request costs one ``read`` instead of a read and
a read that fails with EAGAIN. It is the one transport: tests run the mux on socket pairs.

A frame, or a ttrpc message inside the frames, that is begun must end within
``INCOMPLETE_TIMEOUT``: a peer that sends part of one and stalls would otherwise hold the
channel, unanswered, for as long as it stays connected. Past it the trunk is given up with a
``ProtocolError`` naming what stalled; the session ends and the service dials again.
"""

from __future__ import annotations

import errno
import logging
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
INCOMPLETE_TIMEOUT = 5.0
"""Seconds a begun mux frame or ttrpc message may wait for its rest. A runtime writes each
frame whole, so its rest follows at once; this is the default registration timeout, longer
than the default request timeout (2 s), so a request stalled this long was already given
up by the runtime. Without a bound a stalled peer held the channel as long as it stayed
connected, answering nothing."""

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
    """One logical connection: writes are framed onto the trunk, and what arrives is
    handed to one listener (the ttrpc server or client on it) in the trunk reader's task."""

    def __init__(self, mux: Mux, conn_id: int) -> None:
        self.conn_id = conn_id
        self._mux = mux
        self._queued: list[bytes] = []
        """Payloads that came before ``listen``: the trunk reader starts first."""
        self._listener: Callable[[bytes], int] | None = None
        self._closed = trio.Event()
        self.incomplete = 0
        """Bytes the listener holds of a message not yet whole."""
        self.incomplete_since: float | None = None
        """When that message began (``Mux`` bounds how long it may wait); None: none is."""

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

    def listen(self, on_data: Callable[[bytes], int]) -> None:
        """From now on call ``on_data`` with each payload, in the trunk reader's task.
        Payloads that came before are handed over first. ``on_data`` returns how many
        bytes it holds of a message not yet whole."""
        self._listener = on_data
        queued, self._queued = self._queued, []
        for payload in queued:
            self._hand_over(on_data, payload)

    async def wait_closed(self) -> None:
        """Return once the trunk is closed (after the last payload was delivered)."""
        await self._closed.wait()

    def _deliver(self, payload: bytes) -> None:
        if not payload:
            return
        if self._listener is not None:
            self._hand_over(self._listener, payload)
        else:
            self._queued.append(payload)

    def _hand_over(self, on_data: Callable[[bytes], int], payload: bytes) -> None:
        held = on_data(payload)
        if not held:
            self.incomplete_since = None
        elif self.incomplete_since is None or held < self.incomplete + len(payload):
            # Held bytes less than before plus these: a message ended, the one held began.
            self.incomplete_since = trio.current_time()
        self.incomplete = held

    def _close(self) -> None:
        self._closed.set()


class Mux:
    """The trunk: one reader task (``run``) feeding channels 1 and 2, and a framed writer."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self._trunk = FdTrunk(stream)
        self._send_lock = WriteLock()
        self._channels = {
            cid: MuxChannel(self, cid) for cid in (PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN)
        }
        self._channel_list = tuple(self._channels.values())
        self._decoder = FrameDecoder(self._channels)
        self._incomplete_timeout = INCOMPLETE_TIMEOUT
        self._frame_since: float | None = None
        """When the frame not yet whole began; None: there is none."""
        self._incomplete_since: float | None = None
        """When the oldest frame or message not yet whole began; None: there is none."""

    def channel(self, conn_id: int) -> MuxChannel:
        return self._channels[conn_id]

    async def send(self, conn_id: int, data: bytes) -> None:
        await self.send_frames(encode_frames(conn_id, data))

    async def send_frames(self, frames: bytes) -> None:
        """Write whole frames; one call per message keeps its frames contiguous and our
        writes un-interleaved."""
        try:
            if not self._send_lock.locked():
                # Nobody is mid-write: try it at once. Most replies fit the socket buffer,
                # so this is the whole send, and it does not yield (the handler that called
                # it is about to end anyway).
                sent = self._trunk.write_nowait(frames)
                if sent == len(frames):
                    return
                frames = frames[sent:]
            async with self._send_lock:
                await self._trunk.send_all(frames)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise ConnectionLost(f"NRI socket write failed: {exc}") from exc

    def send_frames_nowait(self, frames: bytes) -> Rest | None:
        """Write whole frames from synchronous code (a request answered in the reader task).

        None: all written. Otherwise the call that sends the rest, to be run in a task; the
        send lock is then already held for it (taken here, so no other write can come in
        between), or, when someone else is mid-write, it is a plain ``send_frames``. Only a
        connection that is ending may leave the rest unsent."""
        if not self._send_lock.acquire_nowait():
            return partial(self.send_frames, frames)
        try:
            sent = self._trunk.write_nowait(frames)
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
            await self._trunk.send_all(frames)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise ConnectionLost(f"NRI socket write failed: {exc}") from exc
        finally:
            self._send_lock.release()

    async def send_raw(self, data: bytes) -> None:
        """Write bytes to the trunk unframed (test peers use it to send broken frames)."""
        async with self._send_lock:
            await self._trunk.send_all(data)

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
                if self._incomplete_since is None:
                    data = await self._trunk.receive_some()
                else:
                    data = await self._receive_the_rest()
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                raise ConnectionLost(f"NRI socket read failed: {exc}") from exc
            if not data:
                if self._decoder.pending():
                    raise ProtocolError("NRI socket closed in the middle of a mux frame")
                raise ConnectionLost("NRI socket closed by the peer")
            after = afterreply.CURRENT
            if after is None:
                ended = self._deliver(data)
            else:
                after.begin_batch()
                try:
                    ended = self._deliver(data)
                finally:
                    after.end_batch()
            self._note_incomplete(ended)

    def _deliver(self, data: bytes) -> bool:
        """Hand the frames ``data`` completes to their channels; True if there were any."""
        ended = False
        for conn_id, payload in self._decoder.feed(data):
            ended = True
            self._channels[conn_id]._deliver(payload)
        return ended

    def _note_incomplete(self, frame_ended: bool) -> None:
        """Start the clock of a frame left unfinished (a frame that ended and another begun
        restarts it), and note when the oldest unfinished frame or message began."""
        if not self._decoder.pending():
            self._frame_since = None
        elif frame_ended or self._frame_since is None:
            self._frame_since = trio.current_time()
        plugin, runtime = self._channel_list
        if self._frame_since is plugin.incomplete_since is runtime.incomplete_since is None:
            self._incomplete_since = None  # the common case, checked first
            return
        starts = (self._frame_since, plugin.incomplete_since, runtime.incomplete_since)
        self._incomplete_since = min(t for t in starts if t is not None)

    async def _receive_the_rest(self) -> bytes:
        """The next bytes, while a begun frame or message waits for them; a
        ``ProtocolError`` if they do not come within ``INCOMPLETE_TIMEOUT`` of its start."""
        assert self._incomplete_since is not None
        with trio.move_on_at(self._incomplete_since + self._incomplete_timeout):
            return await self._trunk.receive_some()
        # The bound passed while we waited, or while a long answer kept us from reading:
        # what has come by now still counts.
        data = self._trunk.read_nowait()
        if data is None:
            raise ProtocolError(self._stalled())
        return data

    def _stalled(self) -> str:
        """What stalled, for the log line of the closed connection."""
        waited = f"nothing more for {self._incomplete_timeout:g} s: closing the connection"
        if self._frame_since == self._incomplete_since:
            return f"the NRI peer sent {self._decoder.pending()} bytes of a mux frame and {waited}"
        chan = next(
            c for c in self._channels.values() if c.incomplete_since == self._incomplete_since
        )
        return (
            f"the NRI peer sent {chan.incomplete} bytes of a ttrpc message on connection "
            f"{chan.conn_id} and {waited}"
        )

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await self._trunk.aclose()


class FdTrunk:
    """The trunk socket as a byte stream, read and written through its file descriptor.

    trio's ``SocketStream.send_all`` always ends in a scheduler trip, and its
    ``receive_some`` tries the read before waiting, which on an idle NRI connection always
    fails with EAGAIN first. Here a write can be tried without yielding (``write_nowait``;
    ``send_all`` waits for room for the rest), and a read waits for readability unless the
    last read found data. The stream still owns the socket: closing it (``aclose``) wakes a
    waiting read or write with ``ClosedResourceError``.
    """

    def __init__(self, stream: trio.SocketStream) -> None:
        self._stream = stream
        self._sock = stream.socket
        self._ready_reads = 0

    @property
    def _fd(self) -> int:
        # Asked each time, never kept: once the socket is closed its number may be reused.
        fd = self._sock.fileno()
        if fd < 0:
            raise trio.ClosedResourceError("the NRI socket was closed")
        return fd

    def write_nowait(self, data: bytes | memoryview) -> int:
        """Bytes written at once, 0 if the socket buffer is full."""
        try:
            return os.write(self._fd, data)
        except BlockingIOError:
            return 0

    async def send_all(self, data: bytes) -> None:
        """Write all of ``data``, waiting for room when the socket buffer is full."""
        await trio.lowlevel.checkpoint_if_cancelled()
        rest = memoryview(data)
        waited = False
        while True:
            rest = rest[self.write_nowait(rest) :]
            if not rest:
                break
            await trio.lowlevel.wait_writable(self._fd)
            waited = True
        if not waited:
            await trio.lowlevel.cancel_shielded_checkpoint()

    def read_nowait(self) -> bytes | None:
        """The bytes waiting now (``b""`` at the end), None if there are none."""
        try:
            return self._read()
        except BlockingIOError:
            return None

    async def receive_some(self) -> bytes:
        """The next bytes, ``b""`` at the end; always a checkpoint when there is nothing
        to read yet, and at least every ``_READS_BEFORE_YIELD`` reads."""
        if self._ready_reads >= _READS_BEFORE_YIELD:
            self._ready_reads = 0
            await trio.lowlevel.checkpoint()
        while True:
            if self._ready_reads == 0:
                await trio.lowlevel.wait_readable(self._fd)
            try:
                return self._read()
            except BlockingIOError:
                self._ready_reads = 0

    def _read(self) -> bytes:
        """One read; ``BlockingIOError`` when nothing is waiting."""
        try:
            data = os.read(self._fd, _RECV_CHUNK)
        except OSError as exc:
            if exc.errno == errno.EBADF:
                raise trio.ClosedResourceError("the NRI socket was closed") from exc
            raise
        # A full chunk means more may be waiting: read again before waiting.
        self._ready_reads = self._ready_reads + 1 if len(data) == _RECV_CHUNK else 0
        return data

    async def aclose(self) -> None:
        await self._stream.aclose()
