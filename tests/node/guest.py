"""A qemu guest with a replay topology, and what the host can do with it: run a command,
start one in the background, copy files in, read files (cgroups, /proc), shut it down.

    with Guest.boot(N4C16, workdir) as guest:
        guest.run("nproc")                      # -> Completed(rc=0, out="16\\n", err="")
        guest.unpack(tarball, "/opt/x")         # through the read-only 9p share
        guest.placement(pid)                    # what the guest kernel holds for a process

The host talks to ``agent.py`` in the guest over a virtio-serial port that qemu connects to a
unix socket here, one JSON line each way (no network: the guest has no network device).
Files travel through a 9p share of ``<workdir>/share``, read-only in the guest; it is slow per
file and fast for big ones, so trees go as tarballs.

Under TCG everything is 10-50x slower than native and swings with the host's load, so every
wait here is a generous bound against a hang, never a measure of speed.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from tests.node.image import HOST_PACKAGES, GuestImage, ensure_image
from tests.node.qemu import qemu_argv
from tests.policies.replay.vm import VmTopology
from tests.runtime.build import PeerUnavailable, ensure_packages

HERE = Path(__file__).resolve().parent
AGENT_FILES = (HERE / "agent.py", HERE / "guest_cri.py", HERE.parent / "cri_api.py")
BOOT_TIMEOUT = 900.0
# The kernel runs with loglevel=4, so its console stays empty until the initramfs prints
# "Loading, please wait..." (5-60 s under TCG). Empty for this long, the kernel hung in its
# early boot (seen once at load 15: qemu busy on every vCPU, nothing printed in 15 min): the
# guest is killed and booted once more.
SILENT_BOOT = 300.0
BOOT_ATTEMPTS = 2
COMMAND_TIMEOUT = 600.0
HUNG_KERNEL = 120
"""A CPU the guest kernel reports stuck this long (its soft-lockup watchdog): the guest is
hung, not slow (a 16-vCPU TCG guest locked up on every CPU once, 7 Dec 2026)."""
_LOCKUP = re.compile(rb"soft lockup - CPU#\d+ stuck for (\d+)s!")
CGROUP = "/sys/fs/cgroup"


class GuestError(RuntimeError):
    """The guest did not boot, died, or a command in it failed."""


class SilentKernel(GuestError):
    """The guest's console stayed empty for ``SILENT_BOOT`` seconds."""


class HungKernel(GuestError):
    """The guest's kernel reported a CPU stuck for ``HUNG_KERNEL`` seconds or more."""


@attrs.frozen
class Completed:
    rc: int
    out: str
    err: str


@attrs.frozen
class KernelPlacement:
    """A process's placement as the guest kernel holds it: its cgroup's effective cpuset and
    the process's own allowed lists (``/proc/PID/status``)."""

    cgroup: str
    cpus: str
    mems: str
    cpus_allowed: str
    mems_allowed: str


class Guest:
    def __init__(self, workdir: Path, proc: subprocess.Popen[bytes], sock: socket.socket) -> None:
        self.workdir = workdir
        self.share = workdir / "share"
        self.console = workdir / "console.log"
        self.proc = proc
        self._sock = sock
        self._buf = b""
        self._ids = itertools.count(1)
        self._copies = itertools.count(1)
        self.boot_seconds = 0.0
        self.hung = False
        """Set once the kernel reported a lockup: nothing more is asked of this guest."""
        self._console_size = 0

    # -- boot and shutdown ----------------------------------------------------------------

    @classmethod
    @contextlib.contextmanager
    def boot(
        cls, topology: VmTopology, workdir: Path, image: GuestImage | None = None
    ) -> Iterator[Guest]:
        """A booted guest, powered off (or killed) on the way out."""
        guest = cls.start(topology, workdir, image)
        try:
            yield guest
        finally:
            guest.shutdown()

    @classmethod
    def start(cls, topology: VmTopology, workdir: Path, image: GuestImage | None = None) -> Guest:
        ensure_packages(HOST_PACKAGES)
        image = image or ensure_image()
        share = workdir / "share"
        share.mkdir(parents=True, exist_ok=True)
        for f in AGENT_FILES:
            shutil.copy(f, share / f.name)
        for _ in range(BOOT_ATTEMPTS - 1):
            try:
                return cls._boot_once(topology, workdir, image, share)
            except (SilentKernel, HungKernel) as e:
                print(f"{e}; booting the guest again", file=sys.stderr)
        return cls._boot_once(topology, workdir, image, share)

    @classmethod
    def _boot_once(
        cls, topology: VmTopology, workdir: Path, image: GuestImage, share: Path
    ) -> Guest:
        # A short path: unix socket paths are limited to 108 bytes.
        sock_path = workdir / "agent.sock"
        sock_path.unlink(missing_ok=True)
        console = workdir / "console.log"
        argv = qemu_argv(topology, image, share, sock_path, console)
        if shutil.which("nice"):
            argv = ["nice", "-n", "10", *argv]
        log = (workdir / "qemu.log").open("wb")
        started = time.monotonic()
        proc = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        try:
            sock = _connect(sock_path, proc, workdir)
            guest = cls(workdir, proc, sock)
            guest._wait_agent(started)
        except BaseException:
            _kill(proc)
            raise
        guest.boot_seconds = time.monotonic() - started
        return guest

    def _wait_agent(self, started: float) -> None:
        """Ping until the agent answers: the port is silent until the guest has booted."""
        while True:
            if self.proc.poll() is not None:
                raise GuestError(f"qemu exited {self.proc.returncode}:\n{self.diagnostics()}")
            if time.monotonic() - started > BOOT_TIMEOUT:
                raise GuestError(f"the guest did not answer in {BOOT_TIMEOUT:.0f}s:\n"
                                 f"{self.diagnostics()}")  # fmt: skip
            silent = not self.console.exists() or self.console.stat().st_size == 0
            if silent and time.monotonic() - started > SILENT_BOOT:
                self._sock.close()
                raise SilentKernel(f"the guest's kernel printed nothing in {SILENT_BOOT:.0f}s")
            with contextlib.suppress(TimeoutError):
                self.request({"op": "ping"}, timeout=5)
                return

    def check_kernel(self, op: object = None) -> None:
        """Raise HungKernel if the console says a CPU has been stuck ``HUNG_KERNEL`` s."""
        if self.hung:
            raise HungKernel(f"the guest's kernel is locked up ({op} not sent)")
        try:
            size = self.console.stat().st_size
        except FileNotFoundError:
            return
        if size == self._console_size:
            return
        self._console_size = size
        stuck = [int(n) for n in _LOCKUP.findall(self.console.read_bytes())]
        if stuck and max(stuck) >= HUNG_KERNEL:
            self.hung = True
            raise HungKernel(f"the guest's kernel reports a CPU stuck for {max(stuck)}s "
                             f"(waiting for {op}):\n{self.diagnostics(12)}")  # fmt: skip

    def shutdown(self, timeout: float = 120) -> None:
        """Power the guest off; kill qemu if it does not go (at once if the kernel hung)."""
        if self.hung:
            timeout = 0
        if self.proc.poll() is None:
            with contextlib.suppress(OSError, GuestError):
                self._send({"op": "poweroff", "seq": 0})
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _kill(self.proc)
        self._sock.close()

    def qemu_rss(self) -> tuple[int, int]:
        """qemu's resident memory now and at its peak (VmRSS, VmHWM), in bytes."""
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        return (int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024)

    def diagnostics(self, lines: int = 40) -> str:
        parts = []
        for name in ("qemu.log", "console.log"):
            path = self.workdir / name
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {name}\n" + "\n".join(tail))
        return "\n".join(parts)

    # -- the agent protocol ---------------------------------------------------------------

    def _send(self, req: Mapping[str, Any]) -> None:
        self._sock.sendall((json.dumps(req) + "\n").encode())

    def request(self, req: Mapping[str, Any], timeout: float = COMMAND_TIMEOUT) -> dict[str, Any]:
        (reply,) = self.request_many([req], timeout)
        return reply

    def request_many(
        self, reqs: Sequence[Mapping[str, Any]], timeout: float = COMMAND_TIMEOUT
    ) -> list[dict[str, Any]]:
        """Send every request at once (the agent answers each in a thread of its own) and
        return the replies in the requests' order."""
        self.check_kernel(reqs[0].get("op") if reqs else None)
        seqs = [next(self._ids) for _ in reqs]
        for seq, req in zip(seqs, reqs, strict=True):
            self._send({**req, "seq": seq})
        replies: dict[int, dict[str, Any]] = {}
        deadline = time.monotonic() + timeout
        while len(replies) < len(seqs):
            while b"\n" in self._buf:
                line, self._buf = self._buf.split(b"\n", 1)
                reply: dict[str, Any] = json.loads(line)
                if reply.get("seq") in seqs:  # else a late answer to a ping that timed out
                    replies[reply["seq"]] = reply
            if len(replies) == len(seqs):
                break
            self._receive(deadline, reqs[0].get("op"), timeout)
        for req, seq in zip(reqs, seqs, strict=True):
            if "error" in replies[seq]:
                raise GuestError(f"agent: {req.get('op')} failed: {replies[seq]['error']}")
        return [replies[seq] for seq in seqs]

    def _receive(self, deadline: float, op: object, timeout: float) -> None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"the guest agent did not answer {op} in {timeout}s")
        if self.proc.poll() is not None:
            raise GuestError(f"qemu exited {self.proc.returncode}:\n{self.diagnostics()}")
        self.check_kernel(op)
        self._sock.settimeout(min(left, 1.0))
        try:
            chunk = self._sock.recv(1 << 20)
        except TimeoutError:
            return
        if not chunk:
            raise GuestError(f"the agent's socket closed:\n{self.diagnostics()}")
        self._buf += chunk

    # -- commands -------------------------------------------------------------------------

    def run(
        self,
        *argv: str,
        timeout: float = COMMAND_TIMEOUT,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
        check: bool = True,
    ) -> Completed:
        reply = self.request(
            {"op": "run", "argv": list(argv), "timeout": timeout, "input": input,
             "env": dict(env or {})},
            timeout=timeout + 60,
        )  # fmt: skip
        if reply["rc"] is None:
            raise TimeoutError(f"`{' '.join(argv)}` ran past {timeout:.0f}s in the guest")
        done = Completed(int(reply["rc"]), reply["out"], reply["err"])
        if check and done.rc != 0:
            raise GuestError(f"`{' '.join(argv)}` exited {done.rc}: {done.err.strip()[-2000:]}")
        return done

    def sh(self, script: str, **kw: Any) -> Completed:
        return self.run("/bin/sh", "-c", script, **kw)

    def spawn(self, *argv: str, log: str, env: Mapping[str, str] | None = None) -> int:
        reply = self.request({"op": "spawn", "argv": list(argv), "log": log,
                              "env": dict(env or {})})  # fmt: skip
        return int(reply["pid"])

    def signal(self, pid: int, sig: signal.Signals) -> None:
        self.request({"op": "signal", "pid": pid, "sig": sig.name})

    def wait(self, pid: int, timeout: float) -> int | None:
        """The exit status of a spawned process, or None if it still runs after ``timeout``."""
        reply = self.request({"op": "wait", "pid": pid, "timeout": timeout}, timeout=timeout + 60)
        return None if reply["rc"] is None else int(reply["rc"])

    def cri(self, call: str, **args: Any) -> dict[str, Any]:
        """A CRI call to the guest's containerd, made by the agent (``guest_cri.py``)."""
        reply = self.request({"op": "cri", "call": call, **args}, timeout=COMMAND_TIMEOUT + 60)
        reply.pop("seq", None)  # the protocol's, not the call's
        return reply

    def read(self, path: str) -> str:
        return str(self.request({"op": "read", "path": path})["data"])

    def write(self, path: str, data: str, mode: int = 0o644) -> None:
        self.request({"op": "write", "path": path, "data": data, "mode": mode})

    # -- files ----------------------------------------------------------------------------

    def shared(self, path: Path) -> str:
        """``path`` placed in the share; its path in the guest."""
        name = f"{next(self._copies)}-{path.name}"
        target = self.share / name
        try:
            os.link(path, target)
        except OSError:
            shutil.copy(path, target)
        return f"/mnt/host/{name}"

    def copy_in(self, path: Path, dest: str, mode: int = 0o644) -> None:
        self.run("install", "-D", "-m", f"{mode:o}", self.shared(path), dest)

    def unpack(self, tarball: Path, dest: str) -> None:
        self.run("mkdir", "-p", dest)
        self.run("tar", "-C", dest, "-xf", self.shared(tarball))

    # -- what the kernel holds ------------------------------------------------------------

    def placement(self, pid: int) -> KernelPlacement:
        return self.placements({"": pid})[""]

    def placements(self, pids: Mapping[str, int]) -> dict[str, KernelPlacement]:
        """For each key's process: its cgroup v2 effective cpuset and its allowed lists, read
        by the agent itself (one round trip, no process started in the guest)."""
        if not pids:
            return {}
        found = self.request({"op": "placements", "pids": dict(pids)})["found"]
        return {key: KernelPlacement(*found[key]) for key in pids}


def _connect(path: Path, proc: subprocess.Popen[bytes], workdir: Path) -> socket.socket:
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            log = (workdir / "qemu.log").read_text(errors="replace")
            raise PeerUnavailable(f"qemu exited {proc.returncode} at start:\n{log[-3000:]}")
        if path.exists():
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(str(path))
                return sock
            except OSError:
                sock.close()
        if time.monotonic() > deadline:
            raise PeerUnavailable(f"qemu did not open {path} in 60s")
        time.sleep(0.2)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
