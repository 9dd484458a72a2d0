"""Serving the HTTP endpoint with a bounded number of connections.

Every connection costs the daemon a file descriptor, and the descriptors are shared with what
must keep working: the NRI connection, the kubelet's DRA connections, the state and CDI files,
the API server. hypercorn's worker accepts as long as the kernel gives it descriptors, so 300
slow clients once took all 256 of a daemon's and its own opens failed until the clients timed
out. Here the accept loop waits while ``connection_cap()`` connections are open: the next
clients wait in the kernel's listen backlog (which costs the daemon no descriptor) until one
closes or hypercorn's ``read_timeout`` drops a stalled one.

hypercorn's own per-connection handler (``hypercorn.trio.tcp_server.TCPServer``) serves each
connection, so no HTTP parsing is ours; what replaces hypercorn's ``worker_serve`` is only
this loop (our app needs no ASGI lifespan events).
"""

from __future__ import annotations

import errno
import logging
import resource
import socket
from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:
    from hypercorn.config import Config
    from hypercorn.typing import AppWrapper

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 64
"""Probes and a scraper or two need a handful."""
SHARE_OF_DESCRIPTORS = 4
"""At most a quarter of the descriptor limit goes to HTTP connections."""
# Accept errors that mean "out of descriptors or memory right now", as trio.serve_listeners
# treats them: wait and try again rather than fail.
_TRANSIENT = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}
_RETRY_ACCEPT = 0.1


def connection_cap(descriptor_limit: int | None = None) -> int:
    """How many HTTP connections may be open at once, from the soft RLIMIT_NOFILE."""
    if descriptor_limit is None:
        descriptor_limit, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if descriptor_limit == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(1, min(MAX_CONNECTIONS, descriptor_limit // SHARE_OF_DESCRIPTORS))


async def serve_capped(app: AppWrapper, config: Config, sock: socket.socket, cap: int) -> None:
    """Serve ``app`` on the listening ``sock``, at most ``cap`` connections at a time."""
    from hypercorn.trio.tcp_server import TCPServer
    from hypercorn.trio.worker_context import WorkerContext

    context = WorkerContext(None)
    listener = trio.SocketListener(trio.socket.from_stdlib_socket(sock))
    slots = trio.Semaphore(cap)
    level = logging.WARNING  # the first time the limit is reached; later ones at debug
    async with trio.open_nursery() as nursery:
        while True:
            if slots.value == 0:
                log.log(level, "HTTP endpoint: %d connections open, its limit; new ones wait", cap)
                level = logging.DEBUG
            await slots.acquire()
            try:
                stream = await _accept(listener)
            except BaseException:
                slots.release()
                raise
            nursery.start_soon(_serve_one, TCPServer, app, config, context, stream, slots)


async def _accept(listener: trio.SocketListener) -> trio.SocketStream:
    while True:
        try:
            return await listener.accept()
        except OSError as exc:
            if exc.errno not in _TRANSIENT:
                raise
            log.debug("HTTP endpoint: accept failed (%s); retrying", exc)
            await trio.sleep(_RETRY_ACCEPT)


async def _serve_one(
    server: Any,
    app: AppWrapper,
    config: Config,
    context: Any,
    stream: trio.SocketStream,
    slots: trio.Semaphore,
) -> None:
    try:
        await server(app, config, context, {}, stream)  # closes the stream when done
    finally:
        slots.release()


__all__ = ["MAX_CONNECTIONS", "connection_cap", "serve_capped"]
