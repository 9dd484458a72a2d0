"""The ttrpc frame codec: a 10-byte header, then a protobuf Request or Response.

Header: data length (u32 BE), stream id (u32 BE), message type (u8), flags (u8). Messages
longer than 4 MiB are refused on both sides: we never send one, and a header announcing one
is a protocol error before any of its body is buffered.
"""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable, Iterator
from typing import Protocol

import attrs

from nri_resmgr.nri.errors import Code, ProtocolError, RpcError

HEADER_LEN = 10
MAX_MESSAGE_LEN = 4 << 20
MSG_REQUEST = 0x01
MSG_RESPONSE = 0x02
MSG_DATA = 0x03
FLAG_REMOTE_CLOSED = 0x01
FLAG_REMOTE_OPEN = 0x02
FLAG_NO_DATA = 0x04
_HEADER = struct.Struct(">IIBB")


class Channel(Protocol):
    """What ttrpc runs on: one logical connection of the NRI mux (``MuxChannel``). It
    writes each message whole itself (header and body in one trunk write, nothing of
    another message in between), and hands over incoming bytes as they arrive, from its
    own reader task, so that a message skips a queue and a reader task of ours."""

    async def send_message(self, header: bytes, body: bytes) -> None: ...

    def send_message_nowait(
        self, header: bytes, body: bytes
    ) -> Callable[[], Awaitable[None]] | None:
        """Write it without yielding if it goes out at once (None), else the rest to run
        in a task (see ``Mux.send_frames_nowait``)."""

    def listen(self, on_data: Callable[[bytes], int]) -> None:
        """Hand each payload to ``on_data``, which returns the bytes it holds of a message
        not yet whole."""

    async def wait_closed(self) -> None: ...


@attrs.frozen
class Message:
    stream_id: int
    msg_type: int
    data: bytes = b""
    flags: int = 0


def encode_message(msg: Message) -> bytes:
    return encode_header(msg) + msg.data


def encode_header(msg: Message) -> bytes:
    """The 10-byte header of ``msg``; refuses a message over the size limit."""
    if len(msg.data) > MAX_MESSAGE_LEN:
        raise RpcError(
            Code.RESOURCE_EXHAUSTED,
            f"message length {len(msg.data)} exceeds maximum message size of {MAX_MESSAGE_LEN}",
        )
    if not 0 <= msg.stream_id <= 0xFFFFFFFF:
        raise ValueError(f"ttrpc stream id {msg.stream_id} out of range")
    return _HEADER.pack(len(msg.data), msg.stream_id, msg.msg_type, msg.flags)


class Writer:
    """Writes whole messages to a channel (which keeps each one whole on the trunk); a
    message over the size limit is refused before anything is written."""

    def __init__(self, channel: Channel) -> None:
        self._channel = channel

    def write_nowait(self, msg: Message) -> Callable[[], Awaitable[None]] | None:
        """Write from synchronous code: None when written whole at once, else the rest of
        the write, which the caller must run in a task. Raises ``RpcError`` for a message
        over the size limit, before anything is written."""
        return self._channel.send_message_nowait(encode_header(msg), msg.data)

    async def write(self, msg: Message) -> None:
        await self._channel.send_message(encode_header(msg), msg.data)


class MessageDecoder:
    """Incremental decoder: feed it bytes as they arrive, get whole messages out."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes | bytearray) -> Iterator[Message]:
        self._buf += data
        while len(self._buf) >= HEADER_LEN:
            length, stream_id, msg_type, flags = _HEADER.unpack_from(self._buf)
            if length > MAX_MESSAGE_LEN:
                raise ProtocolError(
                    f"ttrpc message of {length} bytes on stream {stream_id} exceeds "
                    f"the maximum message size of {MAX_MESSAGE_LEN}"
                )
            end = HEADER_LEN + length
            if len(self._buf) < end:
                return
            body = bytes(self._buf[HEADER_LEN:end])
            del self._buf[:end]
            yield Message(stream_id=stream_id, msg_type=msg_type, data=body, flags=flags)

    def pending(self) -> int:
        return len(self._buf)


async def push_messages(channel: Channel, on_message: Callable[[Message], None]) -> None:
    """Call ``on_message`` with every message on ``channel``, as its bytes are delivered,
    until a clean end; a cut-off message is a protocol error. ``on_message`` runs in the
    transport's reader task: it must not block."""
    decoder = MessageDecoder()

    def on_data(data: bytes) -> int:
        for msg in decoder.feed(data):
            on_message(msg)
        return decoder.pending()

    channel.listen(on_data)
    await channel.wait_closed()
    if decoder.pending():
        raise ProtocolError(f"connection closed inside a ttrpc message ({decoder.pending()} bytes)")
