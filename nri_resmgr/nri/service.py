"""The NRI handler task of the daemon: dial the runtime, run a plugin session, re-dial.

A runtime restart closes the socket; we log it and dial again with backoff, and the new
runtime's Synchronize hands the policy its pods and containers back. A plugin started by the
runtime itself gets a pre-connected socket (``NRI_PLUGIN_SOCKET``) that cannot be re-dialled:
losing it ends the daemon, and the runtime starts a fresh one.
"""

from __future__ import annotations

import logging
import os
import re
import socket
from collections.abc import Mapping

import attrs
import trio

from nri_resmgr.backoff import Backoff
from nri_resmgr.errors import ConfigError, Fatal
from nri_resmgr.instrumentation import READINESS
from nri_resmgr.nri.errors import ConnectionLost, ProtocolError, RpcError
from nri_resmgr.nri.stub import PluginSession
from nri_resmgr.resmgr.manager import ResourceManager

log = logging.getLogger(__name__)

DEFAULT_SOCKET_PATH = "/var/run/nri/nri.sock"
ENV_PLUGIN_NAME = "NRI_PLUGIN_NAME"
ENV_PLUGIN_IDX = "NRI_PLUGIN_IDX"
ENV_PLUGIN_SOCKET = "NRI_PLUGIN_SOCKET"
_NAME_RE = re.compile(r"^[A-Za-z0-9_.+-]+$")
_INDEX_RE = re.compile(r"^[0-9]{2}$")


@attrs.frozen
class PluginIdentity:
    name: str
    index: str
    socket_fd: int | None = None


def identity_errors(name: str, index: str) -> list[str]:
    """What the runtime would refuse in RegisterPlugin, said before we dial."""
    errors = []
    if not _NAME_RE.match(name):
        errors.append(f"NRI plugin name {name!r}: use only letters, digits and _.+-")
    if not _INDEX_RE.match(index):
        errors.append(f"NRI plugin index {index!r}: must be exactly two digits, e.g. 90")
    return errors


def plugin_identity(name: str, index: str, env: Mapping[str, str] | None = None) -> PluginIdentity:
    """Name and index as resolved by the caller (the CLI reads ``NRI_PLUGIN_NAME`` and
    ``NRI_PLUGIN_IDX``), plus the pre-connected fd a runtime-launched plugin inherits."""
    env = os.environ if env is None else env
    errors = identity_errors(name, index)
    fd_text = env.get(ENV_PLUGIN_SOCKET, "")
    fd = None
    if fd_text:
        try:
            fd = int(fd_text)
        except ValueError:
            errors.append(f"{ENV_PLUGIN_SOCKET}={fd_text!r}: not a file descriptor number")
    if errors:
        raise ConfigError(errors)
    return PluginIdentity(name=name, index=index, socket_fd=fd)


class NriService:
    """The daemon service; see ``nri_resmgr.daemon`` for the service contract."""

    name = "nri"

    def __init__(
        self,
        manager: ResourceManager,
        socket_path: str = DEFAULT_SOCKET_PATH,
        plugin_name: str = "resmgr",
        plugin_index: str = "90",
        *,
        env: Mapping[str, str] | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        self._manager = manager
        self.socket_path = socket_path
        self.identity = plugin_identity(plugin_name, plugin_index, env)
        self._backoff = backoff or Backoff(initial=0.2, maximum=10.0)
        self._scope: trio.CancelScope | None = None
        self._stopping = False
        self._done = trio.Event()
        self.connections = 0
        """How many sessions registered so far (for logs and tests)."""

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        # Started at once: waiting for a runtime must not keep the daemon from starting/stopping.
        try:
            with trio.CancelScope() as self._scope:
                task_status.started()
                if self._stopping:
                    return
                if self.identity.socket_fd is not None:
                    await self._serve_fd(self.identity.socket_fd)
                else:
                    await self._dial_loop()
        finally:
            self._done.set()

    async def stop(self) -> None:
        self._stopping = True
        if self._scope is None:
            return
        self._scope.cancel(reason="NRI service stopping")
        await self._done.wait()

    async def _dial_loop(self) -> None:
        reported_absent = False
        while True:
            try:
                stream = await trio.open_unix_socket(self.socket_path)
            except OSError as exc:
                self._log_dial_failure(exc, first=not reported_absent)
                reported_absent = True
                await self._backoff.sleep()
                continue
            reported_absent = False
            await self._run_session(stream)
            await self._backoff.sleep()

    def _log_dial_failure(self, exc: OSError, *, first: bool) -> None:
        level = logging.WARNING if first else logging.DEBUG
        if isinstance(exc, FileNotFoundError):
            log.log(
                level,
                "NRI socket %s does not exist: is NRI enabled in the runtime? retrying",
                self.socket_path,
            )
        elif isinstance(exc, ConnectionRefusedError):
            log.log(
                level, "NRI socket %s refuses connections: runtime down? retrying", self.socket_path
            )
        else:
            log.log(level, "cannot connect to NRI socket %s: %s; retrying", self.socket_path, exc)

    async def _run_session(self, stream: trio.SocketStream) -> None:
        session = PluginSession(self._manager, stream, self.identity.name, self.identity.index)
        try:
            await session.run(on_registered=self._registered)
        except (ConnectionLost, ProtocolError, RpcError) as exc:
            log.warning("NRI connection to %s lost: %s; re-dialling", self.socket_path, exc)
        finally:
            READINESS.set("nri", False)

    def _registered(self) -> None:
        self.connections += 1
        self._backoff.reset()

    async def _serve_fd(self, fd: int) -> None:
        sock = trio.socket.from_stdlib_socket(socket.socket(fileno=fd))
        await self._run_session(trio.SocketStream(sock))
        raise Fatal(
            f"NRI connection on inherited fd {fd} is gone; the runtime restarts launched plugins"
        )
