"""A ttrpc server for unary calls, on one logical connection of the NRI mux (the client is
``ttrpc_client``).

The server dispatches ``Request{service, method}`` to registered handlers; unknown services
and methods get UNIMPLEMENTED, as the Go server answers them. A handler is either a
coroutine function (``RawHandler``), run in its own task under the request's deadline, or a
``Sync`` one: a synchronous body that never waits once it holds its lock. The server decides
where a ``Sync`` body runs: in the reader's task, with no task spawned and no trip through
the scheduler, when its lock is free and no handler task is running (so requests are still
answered in the order the task path would start them); otherwise in a handler task that
waits for the lock under the request's deadline. Either way the same body gives the same
reply.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol, TypeVar

import attrs
import betterproto
import trio

from nri_resmgr._gen import ttrpc as envelope
from nri_resmgr.nri import afterreply, framing, tailtrace, wire
from nri_resmgr.nri.errors import Code, ConnectionLost, RpcError
from nri_resmgr.nri.ttrpc_codec import (
    MSG_REQUEST,
    MSG_RESPONSE,
    Channel,
    Message,
    Writer,
    push_messages,
)

log = logging.getLogger(__name__)

RawHandler = Callable[[bytes], Awaitable[bytes]]
"""Takes the encoded request payload, returns the encoded reply or raises ``RpcError``."""


@attrs.frozen
class Sync:
    """A synchronous handler: ``body`` takes the encoded request payload and returns the
    encoded reply (or raises ``RpcError``) without ever waiting, and runs with ``lock`` held
    (None: it needs none). The server runs it in place when the lock is free, else in a
    task that waits for the lock (see the module docstring)."""

    body: Callable[[bytes], bytes]
    lock: trio.Lock | None = None

    async def call(self, payload: bytes) -> bytes:
        """The body's reply once the lock is ours (the task path)."""
        if self.lock is None:
            return self.body(payload)
        async with self.lock:
            return self.body(payload)


Handler = RawHandler | Sync


class Observer(Protocol):
    """Told of every request a registered handler answers (the daemon's request metrics)."""

    def start(self) -> float | None:
        """Called before the handler runs (before any wait for its lock)."""

    def done(self, method: str, started: float | None, ok: bool) -> None:
        """Called once it has answered (``ok``: without an error), before the reply is
        written, with what ``start`` returned."""


Req = TypeVar("Req", bound=betterproto.Message)


def parse(request_type: type[Req], payload: bytes) -> Req:
    """``payload`` decoded as ``request_type``; an undecodable one is an INTERNAL RpcError."""
    try:
        framing.check(payload, request_type)  # betterproto accepts truncated fields
        return request_type().parse(payload)
    except Exception as exc:
        raise RpcError(Code.INTERNAL, f"cannot decode {request_type.__name__}: {exc}") from exc


def unary(
    request_type: type[Req], fn: Callable[[Req], Awaitable[betterproto.Message]]
) -> RawHandler:
    """Wrap a typed handler into a raw one that decodes its payload and encodes its reply."""

    async def handle(payload: bytes) -> bytes:
        return bytes(await fn(parse(request_type, payload)))

    return handle


class TtrpcServer:
    def __init__(
        self,
        channel: Channel,
        services: Mapping[str, Mapping[str, Handler]],
        observer: Observer | None = None,
    ) -> None:
        self._channel = channel
        self._writer = Writer(channel)
        self._services = services
        self._observer = observer
        self._last_stream_id = 0
        self._tasks = 0
        """Handler tasks started and not yet finished: a body runs in place only with none."""

    async def serve(self) -> None:
        """Serve until the stream ends (then raise ``ConnectionLost``) or a protocol error."""
        async with trio.open_nursery() as nursery:

            def accept(msg: Message) -> None:
                self._accept(nursery, msg)

            await push_messages(self._channel, accept)
            nursery.cancel_scope.cancel(reason="ttrpc connection closed")
        raise ConnectionLost("ttrpc client closed the connection")

    def _accept(self, nursery: trio.Nursery, msg: Message) -> None:
        """Answer a request in place, or start a handler task for it (or its refusal);
        must not block."""
        if msg.msg_type != MSG_REQUEST:
            log.debug("ttrpc server: ignoring message type %#x", msg.msg_type)
            return
        refusal = self._stream_id_refusal(msg.stream_id)
        if refusal:
            nursery.start_soon(self._reply_error, msg.stream_id, Code.INVALID_ARGUMENT, refusal)
            return
        self._last_stream_id = msg.stream_id
        if not self._tasks and self._answered_in_place(nursery, msg):
            return
        self._tasks += 1
        nursery.start_soon(self._handle, msg)

    def _answered_in_place(self, nursery: trio.Nursery, msg: Message) -> bool:
        """Answer ``msg`` here and now if its handler is ``Sync`` and its lock is free;
        False leaves it to the task path (which also answers undecodable requests)."""
        try:
            service, method, payload, _ = wire.ttrpc_request(msg.data)
        except wire.WireError:
            return False
        handler = self._services.get(service, _NO_METHODS).get(method)
        if not isinstance(handler, Sync):
            return False
        lock = handler.lock
        if lock is not None:
            if lock.locked():
                return False  # the task path waits its turn
            # acquire_nowait raises trio.WouldBlock if someone waits (never: it is free).
            lock.acquire_nowait()
        trace = tailtrace.TRACE
        if trace is not None:
            trace.begin(method, "inline")
        observer = self._observer
        started = None if observer is None else observer.start()
        ok = False
        # The deadline needs no scope: the body runs to its end without a checkpoint, as
        # it does on the task path once it holds the lock.
        try:
            try:
                reply = handler.body(payload)
            finally:
                if lock is not None:
                    lock.release()
            response = wire.ttrpc_response(reply)
            ok = True
        except RpcError as exc:
            response = _status(exc.code, exc.message)
        except Exception as exc:
            log.exception("%s/%s failed", service, method)
            response = _status(Code.UNKNOWN, str(exc) or type(exc).__name__)
        if observer is not None:
            observer.done(method, started, ok)
        if trace is not None:
            trace.ready()
        try:
            rest = self._writer.write_nowait(Message(msg.stream_id, MSG_RESPONSE, response))
        except RpcError as exc:  # our reply is too big: tell the caller
            response = _status(exc.code, exc.message)
            rest = self._writer.write_nowait(Message(msg.stream_id, MSG_RESPONSE, response))
        if rest is not None:
            nursery.start_soon(rest)
        if trace is not None:
            trace.end()
        after = afterreply.CURRENT
        if after is not None:
            after.after_reply()
        return True

    def _stream_id_refusal(self, stream_id: int) -> str | None:
        if stream_id % 2 == 0:
            return f"StreamID must be odd for client initiated streams (got {stream_id})"
        if stream_id <= self._last_stream_id:
            return f"StreamID cannot be re-used and must increment (got {stream_id})"
        return None

    async def _handle(self, msg: Message) -> None:
        try:
            await self._handle_task(msg)
        finally:
            self._tasks -= 1

    async def _handle_task(self, msg: Message) -> None:
        try:
            # The envelope is decoded by hand: it is on every call's path (see wire.py).
            service, method, payload, timeout_nano = wire.ttrpc_request(msg.data)
        except wire.WireError as exc:
            await self._reply_error(msg.stream_id, Code.INVALID_ARGUMENT, f"bad request: {exc}")
            return
        trace = tailtrace.TRACE
        if trace is None:
            await self._answer(msg.stream_id, service, method, payload, timeout_nano)
            return
        trace.begin(method, "task")
        try:
            await self._answer(msg.stream_id, service, method, payload, timeout_nano)
        finally:
            trace.end()

    async def _answer(
        self, stream_id: int, service: str, method: str, payload: bytes, timeout_nano: int
    ) -> None:
        handler = self._lookup(service, method)
        if isinstance(handler, RpcError):
            await self._reply_error(stream_id, handler.code, handler.message)
            return
        observer = self._observer
        started = None if observer is None else observer.start()
        ok = False
        try:
            response = await self._call(handler, service, method, payload, timeout_nano)
            ok = True
        except RpcError as exc:
            response = _status(exc.code, exc.message)
        finally:
            if observer is not None:
                observer.done(method, started, ok)
        await self._reply_bytes(stream_id, response)

    async def _call(
        self, handler: Handler, service: str, method: str, payload: bytes, timeout_nano: int
    ) -> bytes:
        """The encoded Response of ``handler`` under the caller's deadline; a failure is an
        ``RpcError``, as the caller is to see it."""
        try:
            # A bare cancel scope rather than fail_after: same deadline, less per call.
            deadline = trio.current_time() + timeout_nano / 1e9 if timeout_nano > 0 else math.inf
            with trio.CancelScope(deadline=deadline) as scope:
                if isinstance(handler, Sync):
                    reply = await handler.call(payload)
                else:
                    reply = await handler(payload)
            if scope.cancelled_caught:
                raise trio.TooSlowError
        except RpcError:
            raise
        except trio.TooSlowError:
            log.warning("%s/%s: handler missed the caller's deadline", service, method)
            raise RpcError(Code.DEADLINE_EXCEEDED, "deadline exceeded") from None
        except Exception as exc:
            log.exception("%s/%s failed", service, method)
            raise RpcError(Code.UNKNOWN, str(exc) or type(exc).__name__) from exc
        return wire.ttrpc_response(reply)

    def _lookup(self, service: str, method: str) -> Handler | RpcError:
        methods = self._services.get(service)
        if methods is None:
            return RpcError(Code.UNIMPLEMENTED, f"service {service}")
        handler = methods.get(method)
        if handler is None:
            return RpcError(Code.UNIMPLEMENTED, f"method {method}")
        return handler

    async def _reply_error(self, stream_id: int, code: int, message: str) -> None:
        await self._reply_bytes(stream_id, _status(code, message))

    async def _reply_bytes(self, stream_id: int, response: bytes) -> None:
        try:
            await self._writer.write(Message(stream_id, MSG_RESPONSE, response))
        except RpcError as exc:
            # Our own reply is too big; tell the caller instead of leaving it waiting.
            await self._writer.write(
                Message(stream_id, MSG_RESPONSE, _status(exc.code, exc.message))
            )
        after = afterreply.CURRENT
        if after is not None:
            after.after_reply()


_NO_METHODS: Mapping[str, Handler] = {}


def _status(code: int, message: str) -> bytes:
    """An encoded Response carrying an error status."""
    return bytes(envelope.Response(status=envelope.Status(code=code, message=message)))
