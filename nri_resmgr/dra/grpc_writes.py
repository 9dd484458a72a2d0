"""One ``write`` per step: what grpclib writes to a connection within one step of work reaches
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

grpclib private API used (pinned to grpclib 0.4.x in pyproject.toml): ``Handler.accept`` is
grpclib's own, with the coroutine wrapped (``_tasks``, ``__gc_step__``, ``request_handler``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Generator
from types import TracebackType
from typing import Any, cast

from grpclib.protocol import H2Protocol, Stream
from grpclib.server import Handler, request_handler

__all__ = ["BatchingProtocol", "batch_writes"]


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
