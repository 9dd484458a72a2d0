"""The one place where grpclib (asyncio) meets trio: a grpclib server on a unix socket, run as a
trio task.

Everything in the daemon runs inside ``async with trio_asyncio.open_loop()``; grpclib's server
and its request handlers live on that asyncio loop. Handlers stay thin: ``TrioGate.call`` runs
the real work as a trio task (a leaner ``trio_asyncio.trio_as_aio``), so locks and state are
plain trio.

Why each piece is here:

* grpclib sends nothing to the client when a handler task is cancelled, so a client would hang
  until its own deadline. ``TrioGate.call`` turns ``asyncio.CancelledError`` into
  ``GRPCError(UNAVAILABLE, "shutting down")``, which grpclib answers with proper trailers.
* grpclib's ``Server.close()`` cancels in-flight handlers at once. We drain instead: stop
  accepting connections, refuse new requests on open connections (UNAVAILABLE), wait up to a
  deadline for the in-flight ones, and only then close (cancelling the stragglers).
* Python 3.11's asyncio leaves unix socket files behind, and refuses to bind over a stale one:
  we unlink before start and after stop, and only a file that is still ours (same inode).
* grpclib writes every HTTP/2 frame it produces at once: a unary answer is three writes
  (headers, data, trailers), three syscalls and up to three wake-ups of kubelet's reader.
  ``grpclib_private`` sends what one step of a connection writes as one, when the step ends.
* A server whose socket file vanished is unreachable for kubelet, and one whose listener died
  serves nobody; the watchdog notices both (it polls, see ``SOCKET_POLL_INTERVAL``) and raises
  ``ServerGaveUp``, a ``Fatal`` error.
* grpclib has no receive-size limit: it reads whatever length a message's prefix announces
  (up to 4 GiB). A request announcing more than ``MAX_RECEIVE_MESSAGE`` (grpc's own default,
  so kubelet's calls to Go drivers are held to the same) is answered RESOURCE_EXHAUSTED
  before its body is read (``grpclib_private``); what was sent stays within grpclib's
  flow-control window and is never acknowledged.

Everything that reaches into grpclib's private API (the listener, the connections, the
batched writes, the size check) is ``grpclib_private.TrackingServer``; this module uses only
grpclib's public names.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import trio
import trio_asyncio
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from nri_resmgr.dra.kubeletplugin.grpclib_private import TrackingServer
from nri_resmgr.errors import Fatal

log = logging.getLogger(__name__)

Req = TypeVar("Req")
Resp = TypeVar("Resp")

# Seconds between checks that the socket file is still ours and the listener still serves.
# fsnotify would be quicker, but a 1 s poll bounds detection well below kubelet's 30 s wipe
# delay and needs no extra machinery.
SOCKET_POLL_INTERVAL = 1.0
DEFAULT_DRAIN_TIMEOUT = 5.0
# Closing is quick (handlers are already cancelled); the bound only guards against a bug.
CLOSE_TIMEOUT = 2.0
SOCKET_MODE = 0o600
# Write bits for group and others on a socket directory: whoever has them could replace
# our socket with their own and receive kubelet's calls.
_UNSAFE_DIRECTORY_BITS = stat.S_IWGRP | stat.S_IWOTH
SHUTTING_DOWN = "shutting down"


class ServerGaveUp(Fatal):
    """A gRPC server can no longer serve: its socket file is gone or its listener died."""


class TrioGate:
    """Runs trio code for asyncio handlers, counts calls in flight, refuses calls once closed."""

    def __init__(self) -> None:
        self._in_flight = 0
        self._closed = False
        self._idle = trio.Event()
        self._idle.set()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def close(self) -> None:
        self._closed = True

    async def call(self, fn: Callable[[Req], Awaitable[Resp]], request: Req) -> Resp:
        """The asyncio side of a handler: ``return await gate.call(trio_fn, request)``."""
        if self._closed:
            raise GRPCError(Status.UNAVAILABLE, SHUTTING_DOWN)
        self._enter()
        try:
            return await self._run_in_trio(fn, request)
        except asyncio.CancelledError:
            if not self._closed:
                # The client reset the stream or its deadline passed: nobody to answer.
                raise
            raise GRPCError(Status.UNAVAILABLE, SHUTTING_DOWN) from None
        except GRPCError:
            raise
        except Exception as e:
            log.exception("gRPC handler %s failed", getattr(fn, "__qualname__", fn))
            raise GRPCError(Status.INTERNAL, f"internal error: {e}") from e
        finally:
            self._leave()

    @staticmethod
    async def _run_in_trio(fn: Callable[[Req], Awaitable[Resp]], request: Req) -> Resp:
        """``fn(request)`` as a trio task, awaited from asyncio.

        What ``trio_asyncio.trio_as_aio`` does, for one fixed shape of call and with less
        on the way (measured: 48 against 72 µs a call on the bench machine): the task is a
        trio system task, so no nursery has to outlive the handlers, and its result comes
        back through a plain asyncio future. A cancelled handler cancels the task."""
        future: asyncio.Future[Resp] = asyncio.get_running_loop().create_future()
        scope = trio.CancelScope()
        trio.lowlevel.spawn_system_task(_resolve, fn, request, future, scope, name=fn)
        try:
            return await future
        finally:
            if not future.done() or future.cancelled():
                scope.cancel(reason="gRPC call cancelled by its caller")

    async def wait_idle(self) -> None:
        """Trio side: return when no call is in flight."""
        while self._in_flight:
            await self._idle.wait()

    def _enter(self) -> None:
        self._in_flight += 1
        if self._idle.is_set():
            self._idle = trio.Event()

    def _leave(self) -> None:
        self._in_flight -= 1
        if not self._in_flight:
            # The asyncio loop runs inside trio's thread (trio-asyncio), so this is safe.
            self._idle.set()


async def _resolve(
    fn: Callable[[Req], Awaitable[Resp]],
    request: Req,
    future: asyncio.Future[Resp],
    scope: trio.CancelScope,
) -> None:
    """The trio side of ``TrioGate._run_in_trio``. A system task must not raise: every
    outcome goes into the future (cancellation as a cancelled future)."""
    try:
        with scope:
            result = await fn(request)
            if not future.done():
                future.set_result(result)
    except Exception as exc:
        if not future.done():
            future.set_exception(exc)
    finally:
        if not future.done():
            future.cancel(msg="the trio task ended without a result")


HandlerFactory = Callable[[TrioGate], Sequence[Any]]


class GrpcServer:
    """One grpclib server on one unix socket, as a trio task.

    ``serve()`` runs until ``stop()`` (returns) or cancellation (cleans up, re-raises), and
    raises ``ServerGaveUp`` if the server stops being reachable on its own.
    """

    def __init__(
        self,
        name: str,
        path: Path,
        handlers: HandlerFactory,
        *,
        drain_timeout: float = DEFAULT_DRAIN_TIMEOUT,
        poll_interval: float = SOCKET_POLL_INTERVAL,
    ) -> None:
        self.name = name
        self.path = path
        self.gate = TrioGate()
        self._handler_factory = handlers
        self._drain_timeout = drain_timeout
        self._poll_interval = poll_interval
        self._grpc: TrackingServer | None = None
        self._inode: tuple[int, int] | None = None
        self._stopping = False
        self._closing = False
        self._stop_requested = trio.Event()
        self._closed = trio.Event()

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        if self._grpc is not None or self._stopping:
            raise RuntimeError(f"{self.name} gRPC server: already started or stopped")
        secure_socket_directory(self.path.parent)
        unlink_stale_socket(self.path)
        self._grpc = await trio_asyncio.aio_as_trio(self._start_server)()
        self._inode = socket_identity(self.path)
        log.info("%s gRPC server listening on %s", self.name, self.path)
        try:
            task_status.started()
            await self._watch()
        finally:
            with trio.CancelScope(shield=True):
                await self.stop()

    async def stop(self) -> None:
        """Drain and close; idempotent. The socket file is gone when ``stop_accepting`` is.

        If the caller is cancelled mid-drain, the close still happens (shielded, bounded).
        """
        if self._closing:
            await self._closed.wait()
            return
        self._closing = True
        self.stop_accepting()
        try:
            await self._drain()
        finally:
            with trio.CancelScope(shield=True):
                await self._close()
            self._closed.set()

    def stop_accepting(self) -> None:
        """Phase one of stop: no new connections or requests; remove the socket file."""
        if self._stopping:
            return
        self._stopping = True
        self._stop_requested.set()
        self.gate.close()
        if self._grpc is not None:
            self._grpc.stop_accepting()
        self._unlink_own_socket()

    async def _drain(self) -> None:
        with trio.move_on_after(self._drain_timeout) as drain:
            await self.gate.wait_idle()
        if drain.cancelled_caught:
            log.warning(
                "%s gRPC server: %d requests still running after %.1fs, cancelling them",
                self.name,
                self.gate.in_flight,
                self._drain_timeout,
            )

    async def _close(self) -> None:
        server = self._grpc
        if server is None:
            return
        server.close()
        with trio.move_on_after(CLOSE_TIMEOUT):
            await trio_asyncio.aio_as_trio(server.wait_closed)()
        server.close_connections()
        log.info("%s gRPC server stopped", self.name)

    async def _start_server(self) -> TrackingServer:
        # Built inside the asyncio loop: grpclib binds to the running loop on construction.
        server = TrackingServer(self._handler_factory(self.gate))
        # Only kubelet (root) talks to these sockets: bind them 0600 whatever the process
        # umask is (umask 000 would make them 0777, open to every local user).
        old_umask = os.umask(0o177)
        try:
            await server.start(path=str(self.path))
        finally:
            os.umask(old_umask)
        os.chmod(self.path, SOCKET_MODE)
        return server

    async def _watch(self) -> None:
        while not self._stop_requested.is_set():
            with trio.move_on_after(self._poll_interval):
                await self._stop_requested.wait()
            if self._stopping:
                return
            problem = self._health_problem()
            if problem:
                log.error("%s gRPC server gave up: %s", self.name, problem)
                raise ServerGaveUp(f"{self.name} gRPC server on {self.path}: {problem}")

    def _health_problem(self) -> str | None:
        if self._grpc is None or not self._grpc.is_serving():
            return "listener is no longer serving"
        identity = socket_identity(self.path)
        if identity is None:
            return "socket file was removed"
        if identity != self._inode:
            return "socket file was replaced by another one"
        return None

    def _unlink_own_socket(self) -> None:
        if self._inode is not None and socket_identity(self.path) == self._inode:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()


def socket_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the socket file at ``path``, or None if there is none."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None
    if not stat.S_ISSOCK(st.st_mode):
        return None
    return (st.st_dev, st.st_ino)


def secure_socket_directory(path: Path) -> None:
    """Refuses a socket directory that is a symlink, not a directory, or someone else's;
    removes group/other write permission from one of ours (fixing, as kubelet's own
    directories are created 0750/0755 and anything wider is a mistake)."""
    try:
        st = path.lstat()
    except FileNotFoundError as exc:
        raise Fatal(f"{path}: socket directory does not exist") from exc
    if stat.S_ISLNK(st.st_mode):
        raise Fatal(f"{path}: socket directory is a symlink; refusing to follow it")
    if not stat.S_ISDIR(st.st_mode):
        raise Fatal(f"{path}: exists and is not a directory")
    if st.st_uid not in (0, os.geteuid()):
        raise Fatal(f"{path}: socket directory is owned by uid {st.st_uid}, not by us or root")
    if st.st_mode & _UNSAFE_DIRECTORY_BITS:
        fixed = stat.S_IMODE(st.st_mode) & ~_UNSAFE_DIRECTORY_BITS
        log.warning("%s: socket directory was writable by group/others (%o); now %o",
                    path, stat.S_IMODE(st.st_mode), fixed)  # fmt: skip
        os.chmod(path, fixed)


def unlink_stale_socket(path: Path) -> None:
    """Remove a socket left by an earlier run; refuse to remove anything that is not a socket."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise Fatal(f"{path}: exists and is not a unix socket; refusing to replace it")
    os.unlink(path)
