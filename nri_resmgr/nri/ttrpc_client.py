"""A ttrpc client for unary calls, on one logical connection of the NRI mux.

It numbers its calls with odd stream ids and matches responses by id, so several calls may
be in flight at once; each waits under its own timeout. When the connection ends, every
waiting call fails with the reason.
"""

from __future__ import annotations

import logging
import math
from typing import TypeVar

import betterproto
import trio

from nri_resmgr._gen import ttrpc as envelope
from nri_resmgr.nri import framing
from nri_resmgr.nri.errors import Code, ConnectionLost, ProtocolError, RpcError
from nri_resmgr.nri.ttrpc_codec import (
    MSG_REQUEST,
    MSG_RESPONSE,
    Channel,
    Message,
    Writer,
    push_messages,
)

log = logging.getLogger(__name__)

Rsp = TypeVar("Rsp", bound=betterproto.Message)


class _Pending:
    def __init__(self) -> None:
        self.done = trio.Event()
        self.response: envelope.Response | None = None
        self.error: Exception | None = None


class TtrpcClient:
    def __init__(self, channel: Channel) -> None:
        self._channel = channel
        self._writer = Writer(channel)
        self._next_id = 1
        self._pending: dict[int, _Pending] = {}
        self._closed: Exception | None = None

    async def run(self) -> None:
        """Read responses until the stream ends; then every waiting call fails."""
        try:
            await push_messages(self._channel, self._dispatch)
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


def _payload_or_raise(pending: _Pending, service: str, method: str) -> bytes:
    if pending.error is not None:
        raise ConnectionLost(f"{service}/{method}: {pending.error}") from pending.error
    assert pending.response is not None
    status = pending.response.status
    if status.code != Code.OK:
        raise RpcError(status.code, status.message)
    payload: bytes = pending.response.payload
    return payload
