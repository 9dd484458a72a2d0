"""Drives the Go NRI runtime harness (and plugin processes) from trio tests.

The harness speaks JSON lines: one command per line on its stdin, exactly one reply per
command on its stdout, in order. ``Harness`` wraps that as async methods; every call has a
timeout, and leaving ``open_harness`` always ends the process (quit, then kill).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

import trio

JSON = dict[str, Any]
T = TypeVar("T")

CALL_TIMEOUT = 15.0
EXIT_TIMEOUT = 5.0

# NRI event numbers (api.Event); a plugin's subscription mask has bit (event - 1) set.
EVENTS = {
    "RunPodSandbox": 1,
    "StopPodSandbox": 2,
    "RemovePodSandbox": 3,
    "CreateContainer": 4,
    "PostCreateContainer": 5,
    "StartContainer": 6,
    "PostStartContainer": 7,
    "UpdateContainer": 8,
    "PostUpdateContainer": 9,
    "StopContainer": 10,
    "RemoveContainer": 11,
    "UpdatePodSandbox": 12,
    "PostUpdatePodSandbox": 13,
    "ValidateContainerAdjustment": 14,
}
# Events each harness build knows; subscribing to anything else gets a plugin rejected.
VALID_EVENT_MASKS = {"v0.6": (1 << 11) - 1, "v0.12": (1 << 14) - 1}


def event_bit(name: str) -> int:
    return 1 << (EVENTS[name] - 1)


class HarnessError(RuntimeError):
    """The harness refused a command, timed out, or died; carries its stderr tail."""


def pruned(value: Any) -> Any:
    """``value`` without empty objects and lists: the runtime's merged adjustment always
    carries empty sub-messages, which mean "no change"."""
    if isinstance(value, dict):
        items = ((k, pruned(v)) for k, v in value.items())
        return {k: v for k, v in items if v not in ({}, [], None)}
    if isinstance(value, list):
        return [pruned(v) for v in value]
    return value


class _Lines:
    """Splits a byte stream into lines."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self._stream = stream
        self._buf = bytearray()

    async def next_line(self) -> bytes:
        while b"\n" not in self._buf:
            chunk = await self._stream.receive_some(65536)
            if not chunk:
                raise EOFError("stream closed")
            self._buf += chunk
        line, _, rest = bytes(self._buf).partition(b"\n")
        self._buf = bytearray(rest)
        return line


class Harness:
    """One running harness process; use ``open_harness`` to get one."""

    def __init__(self, proc: trio.Process, log_path: Path, socket: Path) -> None:
        self._proc = proc
        self._lines = _Lines(_required(proc.stdout))
        self.log_path = log_path
        self.socket = socket
        self.info: JSON = {}

    async def call(self, op: str, *, timeout: float = CALL_TIMEOUT, **fields: Any) -> JSON:
        """Sends one command and returns its reply; raises ``HarnessError`` unless ok."""
        reply = await self.call_unchecked(op, timeout=timeout, **fields)
        if not reply.get("ok"):
            raise HarnessError(f"harness {op} failed: {reply.get('error')}\n{self.log_tail()}")
        return reply

    async def call_unchecked(
        self, op: str, *, timeout: float = CALL_TIMEOUT, **fields: Any
    ) -> JSON:
        line = json.dumps({"op": op, **fields}).encode() + b"\n"
        with trio.move_on_after(timeout) as scope:
            await _required(self._proc.stdin).send_all(line)
            reply = await self._read_reply()
        if scope.cancelled_caught:
            raise HarnessError(f"harness {op}: no reply within {timeout}s\n{self.log_tail()}")
        if reply.get("op") != op:
            raise HarnessError(f"harness replied to {reply.get('op')!r}, expected {op!r}: {reply}")
        return reply

    async def _read_reply(self) -> JSON:
        try:
            line = await self._lines.next_line()
        except (EOFError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise HarnessError(f"harness exited ({exc})\n{self.log_tail()}") from exc
        try:
            reply = json.loads(line)
        except json.JSONDecodeError as exc:
            raise HarnessError(f"harness wrote a non-JSON line: {line!r}") from exc
        if not isinstance(reply, dict):
            raise HarnessError(f"harness wrote a non-object reply: {line!r}")
        return reply

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no harness log)"
        return "harness log tail:\n" + "\n".join(text.splitlines()[-lines:])

    # The commands, one method each.

    async def wait_plugin(self, count: int = 1, timeout: float = 10.0) -> JSON:
        """Waits until ``count`` plugins are registered, configured and synchronized."""
        return await self.call(
            "wait-plugin", count=count, timeout_ms=int(timeout * 1000), timeout=timeout + 5
        )

    async def plugins(self) -> list[JSON]:
        reply = await self.call("plugins")
        return list(reply["plugins"])

    async def sync_state(self, pods: Sequence[JSON], containers: Sequence[JSON]) -> JSON:
        """Sets the pods and containers the next Synchronize hands to a connecting plugin."""
        return await self.call("sync-state", pods=list(pods), containers=list(containers))

    async def syncs(self) -> list[JSON]:
        return list((await self.call("syncs"))["syncs"])

    async def relay(self, op: str, **fields: Any) -> JSON:
        """Forwards one lifecycle event (``run-pod``, ``create-container``, ...)."""
        return await self.call(op, **fields)

    async def updates(self, count: int = 0, timeout: float = 5.0) -> list[JSON]:
        """Plugin-initiated UpdateContainers calls since the last look (waits for ``count``)."""
        reply = await self.call(
            "updates", count=count, timeout_ms=int(timeout * 1000), timeout=timeout + 5
        )
        return list(reply["updates"])

    async def fail_updates(self, container_ids: Sequence[str]) -> None:
        await self.call("fail-updates", container_ids=list(container_ids))

    async def restart(self) -> JSON:
        """Stops the runtime (dropping plugin connections) and starts it on the same socket."""
        return await self.call("restart")

    async def aclose(self) -> None:
        if self._proc.returncode is None:
            with trio.move_on_after(EXIT_TIMEOUT):
                with suppress(HarnessError):
                    await self.call_unchecked("quit", timeout=EXIT_TIMEOUT)
                await self._proc.wait()
        await _reap(self._proc)


@asynccontextmanager
async def open_harness(binary: Path, workdir: Path, **flags: str) -> AsyncIterator[Harness]:
    """Starts ``binary`` listening on ``workdir/nri.sock``; extra flags go to the harness."""
    socket = workdir / "nri.sock"
    log_path = workdir / f"{binary.name}.log"
    argv = [str(binary), "-socket", str(socket), "-workdir", str(workdir / "runtime")]
    argv += [f"-{k.replace('_', '-')}={v}" for k, v in flags.items()]
    with log_path.open("wb") as log:
        proc = await trio.lowlevel.open_process(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log
        )
    harness = Harness(proc, log_path, socket)
    try:
        with trio.fail_after(CALL_TIMEOUT):
            harness.info = await harness._read_reply()
        if harness.info.get("op") != "ready":
            raise HarnessError(f"harness did not start: {harness.info}\n{harness.log_tail()}")
        yield harness
    finally:
        with trio.CancelScope(shield=True):
            await harness.aclose()


@asynccontextmanager
async def run_process(
    argv: Sequence[str], log_path: Path, env: dict[str, str] | None = None
) -> AsyncIterator[trio.Process]:
    """Runs a plugin process for the duration of the block, output to ``log_path``;
    terminates it (then kills it) on the way out."""
    with log_path.open("wb") as log:
        proc = await trio.lowlevel.open_process(
            list(argv), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env
        )
    try:
        yield proc
    finally:
        with trio.CancelScope(shield=True):
            if proc.returncode is None:
                proc.terminate()
                with trio.move_on_after(EXIT_TIMEOUT):
                    await proc.wait()
            await _reap(proc)


async def _reap(proc: trio.Process) -> None:
    if proc.returncode is None:
        proc.kill()
    await proc.wait()
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            await stream.aclose()


def _required(stream: T | None) -> T:
    if stream is None:
        raise HarnessError("process was started without the pipe this driver needs")
    return stream
