"""Every use of grpclib's private API, in one place, written against grpclib ``GRPCLIB_VERSION``
(pinned in pyproject.toml; ``tests/dra/test_grpclib_pin.py`` fails on any other version, so
an upgrade starts with a reading of what this module touches).

What is used, and why:

* ``Server._server`` (the asyncio listener): closed on its own, so the server stops accepting
  while requests in flight drain (grpclib's ``close()`` would cancel them).
* ``Server._protocol_factory``: wrapped to remember each connection (stop closes idle ones,
  which grpclib's ``close()`` leaves open) and to batch its writes (below).
* ``Server._handlers`` (the per-connection ``Handler`` objects): closed at stop, so handler
  tasks queued for streams that arrived meanwhile never start on a closed transport.
* ``Server._mapping``: each method's handler wrapped to check message sizes before reading.
* A server stream's ``_stream`` (the HTTP/2 stream ``recv_message`` reads from): wrapped by
  ``_SizeCheckedData``; grpclib itself has no receive-size limit.
* ``Handler.accept`` (grpclib 0.4.9's body, copied), with ``Handler.__gc_step__``,
  ``Handler._tasks``, ``Handler.mapping/codec/status_details_codec/dispatch/loop`` and
  ``grpclib.server.request_handler``: the request task's coroutine is wrapped so each of its
  steps holds the connection's writes.
* The classes of ``H2Protocol`` and its ``handler`` are switched (same fields), so the
  connection's callbacks batch too (``batch_writes``).

One ``write`` per step: what grpclib writes to a connection within one step of work reaches
the socket as one write, at the end of that step.

grpclib writes every HTTP/2 frame it produces at once: a unary answer is three writes
(headers, data, trailers), three syscalls and up to three wake-ups of kubelet's reader. A
*step* here is one step of a request handler task (grpclib's ``Handler.accept`` creates the
task; ``_BatchingHandler`` runs its coroutine through ``_BatchEachStep``) or one
``connection_made``/``data_received`` of the connection (``BatchingProtocol``). While a step
runs, the connection's ``_BatchingTransport`` holds the writes; when it ends, they go out as
one, in order. A write outside any step (grpclib's server makes none today; a keepalive ping
from a timer would be one) goes out at once.

Nothing is scheduled on the loop for this. On trio-asyncio every asyncio callback is a trio
scheduling round of its own (about 13 µs of CPU on the bench machine, more with grpclib's
deadline timers pending), and a flush scheduled with ``call_soon`` would also send the
answer one round later than the end of the step that made it.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Generator, Sequence
from types import TracebackType
from typing import Any, cast

from grpclib.const import Status
from grpclib.exceptions import GRPCError
from grpclib.protocol import H2Protocol, Stream
from grpclib.server import Handler, Server, request_handler

__all__ = ["GRPCLIB_VERSION", "MAX_RECEIVE_MESSAGE", "BatchingProtocol", "TrackingServer",
           "batch_writes"]  # fmt: skip

log = logging.getLogger(__name__)

GRPCLIB_VERSION = "0.4.9"
"""The grpclib release this module was written against."""
MAX_RECEIVE_MESSAGE = 4 << 20
"""Bytes of one request message; grpc's default ``MaxRecvMsgSize`` (kubelet's requests are
a few hundred bytes per claim)."""
_PREFIX = 5
"""A gRPC message's prefix: a compression flag and a 4-byte big-endian length."""


class _BatchingTransport:
    """An asyncio transport whose writes wait while a step holds them (``hold``/``release``,
    which nest). ``close`` sends what is pending first (grpclib's GOAWAY comes just before
    it); ``abort`` drops it, as the transport's own ``abort`` drops its buffer; nothing is
    written once the transport is closing. Everything else is the transport's."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._pending: list[bytes] = []
        self._holds = 0

    def hold(self) -> None:
        self._holds += 1

    def release(self) -> None:
        self._holds -= 1
        if not self._holds and self._pending:
            self._send()

    def write(self, data: bytes) -> None:
        if data:
            self._pending.append(data)
            if not self._holds:
                self._send()

    def close(self) -> None:
        if self._pending:
            self._send()
        self._transport.close()

    def abort(self) -> None:
        self._pending.clear()
        self._transport.abort()

    def _send(self) -> None:
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending.clear()
        if not self._transport.is_closing():
            self._transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class _BatchEachStep(Coroutine[Any, Any, None]):
    """A request handler's coroutine, each of whose steps holds its connection's writes.

    asyncio's Task drives it like any coroutine (``send``, ``throw``); cancellation and the
    result pass through unchanged."""

    __slots__ = ("_coro", "_transport")

    def __init__(self, coro: Coroutine[Any, Any, None], transport: _BatchingTransport) -> None:
        self._coro = coro
        self._transport = transport

    def send(self, value: Any) -> Any:
        self._transport.hold()
        try:
            return self._coro.send(value)
        finally:
            self._transport.release()

    def throw(
        self,
        typ: type[BaseException] | BaseException,
        val: BaseException | object = None,
        tb: TracebackType | None = None,
    ) -> Any:
        self._transport.hold()
        try:
            if val is None and tb is None:
                return self._coro.throw(typ)
            return self._coro.throw(typ, val, tb)  # type: ignore[arg-type]
        finally:
            self._transport.release()

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Generator[Any, None, None]:
        raise TypeError("only its asyncio task drives a handler coroutine")

    # What asyncio's task repr reads, so that it shows where the handler is.
    @property
    def cr_code(self) -> Any:
        return self._coro.cr_code  # type: ignore[attr-defined]

    @property
    def cr_frame(self) -> Any:
        return self._coro.cr_frame  # type: ignore[attr-defined]


class _BatchingHandler(Handler):
    """grpclib's per-connection Handler, whose request tasks batch their writes."""

    transport: _BatchingTransport

    def accept(self, stream: Stream, headers: Any, release_stream: Callable[[], Any]) -> None:
        # Handler.accept of grpclib 0.4.9, with the coroutine wrapped.
        self.__gc_step__()
        coro = request_handler(
            self.mapping,
            stream,
            headers,
            self.codec,
            self.status_details_codec,
            self.dispatch,
            release_stream,
        )
        self._tasks[stream] = self.loop.create_task(_BatchEachStep(coro, self.transport))


class BatchingProtocol(H2Protocol):
    """grpclib's connection protocol, writing through ``_BatchingTransport``; its own
    callbacks (``connection_made``, ``data_received``) are steps too."""

    handler: _BatchingHandler

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        batching = _BatchingTransport(transport)
        self.handler.transport = batching
        batching.hold()
        try:
            super().connection_made(cast(asyncio.Transport, batching))
        finally:
            batching.release()

    def data_received(self, data: bytes) -> None:
        transport = self.handler.transport
        transport.hold()
        try:
            super().data_received(data)
        finally:
            transport.release()


def batch_writes(protocol: H2Protocol) -> BatchingProtocol:
    """Make a protocol that grpclib's ``Server._protocol_factory`` built batch its writes.

    Switching the classes adds the batching without copying grpclib's construction of
    either object (same fields; the handler gets its transport at ``connection_made``)."""
    assert type(protocol.handler) is Handler, type(protocol.handler)
    protocol.handler.__class__ = _BatchingHandler
    protocol.__class__ = BatchingProtocol
    return protocol  # type: ignore[return-value]


class TrackingServer(Server):
    """A grpclib Server that remembers its connections so stop can close them, and whose
    connections send what one step writes in one write (``batch_writes``)."""

    def __init__(self, handlers: Sequence[Any], max_message: int = MAX_RECEIVE_MESSAGE) -> None:
        super().__init__(handlers)
        self.protocols: weakref.WeakSet[H2Protocol] = weakref.WeakSet()
        self._mapping = {
            name: handler._replace(func=_size_checked(handler.func, max_message))
            for name, handler in self._mapping.items()
        }

    def _protocol_factory(self) -> H2Protocol:
        protocol = batch_writes(super()._protocol_factory())
        self.protocols.add(protocol)
        return protocol

    def stop_accepting(self) -> None:
        listener = self._server
        if listener is not None:
            listener.close()

    def is_serving(self) -> bool:
        listener = self._server
        return listener is not None and bool(listener.is_serving())

    def close_connections(self) -> None:
        for protocol in list(self.protocols):
            connection = getattr(protocol, "connection", None)
            if connection is not None:
                connection.close()
        # grpclib's Handler keeps accepting streams after Server.close(): a handler task
        # queued for a stream that arrived meanwhile would start after the close above and
        # fail on the vanished transport ("Server error", AttributeError '_transport').
        # Cancelling them before their first step changes nothing for the client (its
        # connection is already closed) and keeps those bogus errors out of the log.
        for handler in list(self._handlers):
            handler.close()


def _size_checked(
    func: Callable[[Any], Awaitable[None]], limit: int
) -> Callable[[Any], Awaitable[None]]:
    """A grpclib method handler whose stream refuses messages longer than ``limit``."""

    async def handler(stream: Any) -> None:
        stream._stream = _SizeCheckedData(stream._stream, limit)
        await func(stream)

    return handler


class _SizeCheckedData:
    """grpclib's HTTP/2 stream as its message reader sees it: it reads a 5-byte prefix, then
    the length the prefix names; a prefix naming more than ``limit`` is refused before the
    body is read. Everything else is the wrapped stream's."""

    def __init__(self, inner: Any, limit: int) -> None:
        self._inner = inner
        self._limit = limit
        self._prefix_next = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def recv_data(self, size: int) -> bytes:
        data: bytes = await self._inner.recv_data(size)
        is_prefix, self._prefix_next = self._prefix_next, not self._prefix_next
        if is_prefix and size == _PREFIX and len(data) == _PREFIX:
            length = int.from_bytes(data[1:], "big")
            if length > self._limit:
                why = f"request message of {length} bytes exceeds the limit of {self._limit}"
                log.warning("gRPC request refused: %s", why)
                raise GRPCError(Status.RESOURCE_EXHAUSTED, why)
        return data
