"""A ttrpc server and client for unary calls, on any trio byte stream (here: a mux channel).

The server dispatches ``Request{service, method}`` to registered handlers, each in its own
task under the request's deadline; unknown services and methods get UNIMPLEMENTED, as the Go
server answers them. A method may also have an inline handler: a synchronous one that
answers in the reader's task, with no task spawned and no trip through the scheduler, when
it can do so without waiting (it returns None when it would have to wait, and the request
takes the task path). Inline handling is used only while no handler task is running, so
requests are still answered in the order the task path would start them.

The client numbers its calls with odd stream ids and matches responses by id, so several
calls may be in flight at once.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import TypeVar

import betterproto
import trio

from nri_resmgr._gen import ttrpc as envelope
from nri_resmgr.nri import afterreply, framing, tailtrace, wire
from nri_resmgr.nri.errors import Code, ConnectionLost, ProtocolError, RpcError
from nri_resmgr.nri.ttrpc_codec import (
    MSG_REQUEST,
    MSG_RESPONSE,
    ByteStream,
    Message,
    MessageSink,
    PushStream,
    encode_header,
    push_messages,
    read_messages,
)
from nri_resmgr.nri.writelock import WriteLock

log = logging.getLogger(__name__)

RawHandler = Callable[[bytes], Awaitable[bytes]]
"""Takes the encoded request payload, returns the encoded reply or raises ``RpcError``."""
InlineHandler = Callable[[bytes], bytes | None]
"""A RawHandler that cannot block: the reply, or None when it would have to wait."""

Req = TypeVar("Req", bound=betterproto.Message)
Rsp = TypeVar("Rsp", bound=betterproto.Message)


def unary(
    request_type: type[Req], fn: Callable[[Req], Awaitable[betterproto.Message]]
) -> RawHandler:
    """Wrap a typed handler into a raw one that decodes its payload and encodes its reply."""

    async def handle(payload: bytes) -> bytes:
        try:
            framing.check(payload, request_type)  # betterproto accepts truncated fields
            request = request_type().parse(payload)
        except Exception as exc:
            raise RpcError(Code.INTERNAL, f"cannot decode {request_type.__name__}: {exc}") from exc
        return bytes(await fn(request))

    return handle


class Writer:
    """Serialises whole-message writes onto a stream."""

    def __init__(self, stream: ByteStream) -> None:
        self._stream = stream
        self._lock = WriteLock()
        # A sink writes each message whole by itself, so it needs no lock of ours.
        self._sink = stream if isinstance(stream, MessageSink) else None

    def write_nowait(self, msg: Message) -> Callable[[], Awaitable[None]] | None:
        """Write from synchronous code: None when written whole at once, else the rest of
        the write, which the caller must run in a task. Raises ``RpcError`` for a message
        over the size limit, before anything is written."""
        if self._sink is None:
            encode_header(msg)  # the size check, now
            return partial(self.write, msg)
        try:
            return self._sink.send_message_nowait(encode_header(msg), msg.data)
        except OSError as exc:
            raise ConnectionLost(f"ttrpc write failed: {exc}") from exc

    async def write(self, msg: Message) -> None:
        header = encode_header(msg)
        try:
            if self._sink is not None:
                await self._sink.send_message(header, msg.data)
                return
            async with self._lock:
                await self._stream.send_all(header + msg.data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise ConnectionLost(f"ttrpc write failed: {exc}") from exc


class TtrpcServer:
    def __init__(
        self,
        stream: ByteStream,
        services: Mapping[str, Mapping[str, RawHandler]],
        inline: Mapping[str, Mapping[str, InlineHandler]] | None = None,
    ) -> None:
        self._stream = stream
        self._writer = Writer(stream)
        self._services = services
        self._inline = inline or {}
        self._last_stream_id = 0
        self._tasks = 0
        """Handler tasks started and not yet finished: inline handling waits for none."""

    async def serve(self) -> None:
        """Serve until the stream ends (then raise ``ConnectionLost``) or a protocol error."""
        async with trio.open_nursery() as nursery:

            def accept(msg: Message) -> None:
                self._accept(nursery, msg)

            await _each_message(self._stream, accept)
            nursery.cancel_scope.cancel()
        raise ConnectionLost("ttrpc client closed the connection")

    def _accept(self, nursery: trio.Nursery, msg: Message) -> None:
        """Start a handler task for a request (or its refusal); must not block."""
        if msg.msg_type != MSG_REQUEST:
            log.debug("ttrpc server: ignoring message type %#x", msg.msg_type)
            return
        refusal = self._stream_id_refusal(msg.stream_id)
        if refusal:
            nursery.start_soon(self._reply_error, msg.stream_id, Code.INVALID_ARGUMENT, refusal)
            return
        self._last_stream_id = msg.stream_id
        if self._inline and not self._tasks and self._answered_inline(nursery, msg):
            return
        self._tasks += 1
        nursery.start_soon(self._handle, msg)

    def _answered_inline(self, nursery: trio.Nursery, msg: Message) -> bool:
        """Answer ``msg`` here and now if its method has an inline handler that need not
        wait; False leaves it to the task path (which also answers undecodable requests)."""
        try:
            service, method, payload, _ = wire.ttrpc_request(msg.data)
        except wire.WireError:
            return False
        handler = self._inline.get(service, {}).get(method)
        if handler is None:
            return False
        trace = tailtrace.TRACE
        if trace is not None:
            trace.begin(method, "inline")
        # The deadline needs no scope: the handler runs to the end without a checkpoint,
        # as a task-path handler does once it holds the manager lock.
        try:
            reply = handler(payload)
            if reply is None:
                if trace is not None:
                    trace.abandon()
                return False
            response = wire.ttrpc_response(reply)
        except RpcError as exc:
            response = _status(exc.code, exc.message)
        except Exception as exc:
            log.exception("%s/%s failed", service, method)
            response = _status(Code.UNKNOWN, str(exc) or type(exc).__name__)
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
        try:
            if isinstance(handler, RpcError):
                raise handler
            # A bare cancel scope rather than fail_after: same deadline, less per call.
            deadline = trio.current_time() + timeout_nano / 1e9 if timeout_nano > 0 else math.inf
            with trio.CancelScope(deadline=deadline) as scope:
                reply = await handler(payload)
            if scope.cancelled_caught:
                raise trio.TooSlowError
        except RpcError as exc:
            await self._reply_error(stream_id, exc.code, exc.message)
            return
        except trio.TooSlowError:
            log.warning("%s/%s: handler missed the caller's deadline", service, method)
            await self._reply_error(stream_id, Code.DEADLINE_EXCEEDED, "deadline exceeded")
            return
        except Exception as exc:
            log.exception("%s/%s failed", service, method)
            await self._reply_error(stream_id, Code.UNKNOWN, str(exc) or type(exc).__name__)
            return
        await self._reply_bytes(stream_id, wire.ttrpc_response(reply))

    def _lookup(self, service: str, method: str) -> RawHandler | RpcError:
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


class _Pending:
    def __init__(self) -> None:
        self.done = trio.Event()
        self.response: envelope.Response | None = None
        self.error: Exception | None = None


class TtrpcClient:
    def __init__(self, stream: ByteStream) -> None:
        self._stream = stream
        self._writer = Writer(stream)
        self._next_id = 1
        self._pending: dict[int, _Pending] = {}
        self._closed: Exception | None = None

    async def run(self) -> None:
        """Read responses until the stream ends; then every waiting call fails."""
        try:
            await _each_message(self._stream, self._dispatch)
            raise ConnectionLost("ttrpc server closed the connection")
        except Exception as exc:
            self._fail_all(exc)
            raise
        finally:
            self._fail_all(ConnectionLost("ttrpc client stopped"))

    def _dispatch(self, msg: Message) -> None:
        if msg.msg_type != MSG_RESPONSE:
            log.debug("ttrpc client: ignoring message type %#x", msg.msg_type)
            return
        if msg.stream_id % 2 == 0 or msg.stream_id >= self._next_id:
            raise ProtocolError(f"ttrpc response for stream {msg.stream_id}, which we never opened")
        pending = self._pending.pop(msg.stream_id, None)
        if pending is None:
            log.debug("ttrpc client: late response on stream %d dropped", msg.stream_id)
            return
        try:
            framing.check(msg.data, envelope.Response)
            pending.response = envelope.Response().parse(msg.data)
        except Exception as exc:
            error = ProtocolError(f"undecodable ttrpc response on stream {msg.stream_id}: {exc}")
            # Popped above, so _fail_all cannot reach it: fail the waiting call here.
            pending.error = error
            pending.done.set()
            raise error from exc
        pending.done.set()

    def _fail_all(self, exc: Exception) -> None:
        if self._closed is None:
            self._closed = exc
        for pending in self._pending.values():
            pending.error = exc
            pending.done.set()
        self._pending.clear()

    async def call_raw(
        self, service: str, method: str, payload: bytes, timeout: float | None
    ) -> bytes:
        if self._closed is not None:
            raise ConnectionLost(f"ttrpc connection is closed ({self._closed})")
        stream_id = self._next_id
        self._next_id += 2
        timeout_nano = 0 if timeout is None else max(1, int(timeout * 1e9))
        request = envelope.Request(
            service=service, method=method, payload=payload, timeout_nano=timeout_nano
        )
        pending = _Pending()
        self._pending[stream_id] = pending
        try:
            with trio.fail_after(math.inf if timeout is None else timeout):
                await self._writer.write(Message(stream_id, MSG_REQUEST, bytes(request)))
                await pending.done.wait()
        except trio.TooSlowError:
            raise RpcError(
                Code.DEADLINE_EXCEEDED, f"{service}/{method}: no answer within {timeout}s"
            ) from None
        finally:
            self._pending.pop(stream_id, None)
        return _payload_or_raise(pending, service, method)

    async def call(
        self,
        service: str,
        method: str,
        request: betterproto.Message,
        response_type: type[Rsp],
        timeout: float | None,
    ) -> Rsp:
        payload = await self.call_raw(service, method, bytes(request), timeout)
        try:
            framing.check(payload, response_type)  # betterproto accepts truncated fields
            return response_type().parse(payload)
        except Exception as exc:
            raise ProtocolError(
                f"{service}/{method}: cannot decode {response_type.__name__}: {exc}"
            ) from exc


def _status(code: int, message: str) -> bytes:
    """An encoded Response carrying an error status."""
    return bytes(envelope.Response(status=envelope.Status(code=code, message=message)))


async def _each_message(stream: ByteStream, on_message: Callable[[Message], None]) -> None:
    """Every message on ``stream`` to ``on_message`` until a clean end; pushed by the
    transport when it can (no hop through a reader task), else read here."""
    if isinstance(stream, PushStream):
        await push_messages(stream, on_message)
        return
    async for msg in read_messages(stream):
        on_message(msg)


def _payload_or_raise(pending: _Pending, service: str, method: str) -> bytes:
    if pending.error is not None:
        raise ConnectionLost(f"{service}/{method}: {pending.error}") from pending.error
    assert pending.response is not None
    status = pending.response.status
    if status.code != Code.OK:
        raise RpcError(status.code, status.message)
    payload: bytes = pending.response.payload
    return payload
