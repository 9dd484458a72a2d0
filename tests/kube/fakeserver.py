"""A tiny in-process HTTP/1.1 server on trio for fast client tests.

One request per connection (the reply says ``Connection: close``). A handler returns a
``Reply``: a JSON body, or a stream of lines sent chunked as they are produced; a stream that
raises ``DropConnection`` is cut off without the terminating chunk, as a dying server would.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import attrs
import trio


class DropConnection(Exception):
    """Raised inside a reply stream to close the socket mid-reply."""


@attrs.frozen
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@attrs.frozen
class Reply:
    status: int = 200
    body: Any = None
    stream: AsyncIterator[bytes] | None = None
    headers: tuple[tuple[str, str], ...] = ()
    """More reply headers (a stream's ``Content-Encoding``, say)."""


def status_reply(code: int, reason: str, message: str = "") -> Reply:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
            "reason": reason, "message": message}  # fmt: skip
    return Reply(code, body)


def event_line(kind: str, obj: dict[str, Any]) -> bytes:
    return (json.dumps({"type": kind, "object": obj}) + "\n").encode()


Handler = Callable[[Request], Awaitable[Reply]]


async def echo(req: Request) -> Reply:
    """Replies with the request body (or an empty object), as a create or update would."""
    body = req.json() if req.body else {}
    return Reply(body=body if isinstance(body, dict) else {"applied": body})


@attrs.define
class FakeServer:
    handler: Handler
    requests: list[Request] = attrs.field(factory=list)
    url: str = ""

    async def serve(self, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        task_status.started(self.url)
        await trio.serve_listeners(self._connection, listeners)

    async def _connection(self, conn: trio.SocketStream) -> None:
        async with conn:
            request = await _read_request(conn)
            if request is None:
                return
            self.requests.append(request)
            reply = await self.handler(request)
            try:
                await _write_reply(conn, reply)
            except (DropConnection, trio.BrokenResourceError):
                return


async def _read_request(conn: trio.SocketStream) -> Request | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await conn.receive_some(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
    while len(body) < int(headers.get("content-length", "0")):
        body += await conn.receive_some(65536)
    url = urlsplit(target)
    return Request(method, url.path, dict(parse_qsl(url.query)), headers, body)


async def _write_reply(conn: trio.SocketStream, reply: Reply) -> None:
    head = f"HTTP/1.1 {reply.status} X\r\nContent-Type: application/json\r\nConnection: close\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in reply.headers)
    if reply.stream is None:
        payload = b"" if reply.body is None else json.dumps(reply.body).encode()
        await conn.send_all(f"{head}Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
        return
    await conn.send_all(f"{head}Transfer-Encoding: chunked\r\n\r\n".encode())
    async for chunk in reply.stream:
        await conn.send_all(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
    await conn.send_all(b"0\r\n\r\n")
