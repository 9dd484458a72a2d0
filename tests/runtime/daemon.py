"""Our daemon as a real process against containerd's NRI socket, and what containerd's log
says about it (registration, synchronization, plugins it closed)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from tests.runtime.containerd import Containerd, wait_for

PLUGIN = "90-resource-manager"


def registrations(runtime: Containerd) -> int:
    """How many times containerd has logged our plugin connected (and synchronized): NRI
    v0.11 logs ``plugin "X" connected and synchronized``, NRI v0.6 ``plugin "X" connected``,
    both after Synchronize."""
    pattern = rf'plugin \\"{PLUGIN}\\" connected(?: and synchronized)?"'
    return len(re.findall(pattern, runtime.log_text()))


def registered_pids(runtime: Containerd) -> list[int]:
    """PIDs in containerd's ``plugin "external:90-resource-manager[PID]" registered`` lines."""
    pattern = rf'plugin \\"external:{PLUGIN}\[(\d+)\]\\" registered as \\"{PLUGIN}\\"'
    return [int(pid) for pid in re.findall(pattern, runtime.log_text())]


LIVE: set[Daemon] = set()
"""Every started daemon; the containerd fixture kills leftovers, so none outlives a session."""


class Daemon:
    """``config``: a policy document for ``--config-file``; None: the daemon reads its policy
    from the cluster, as ``args`` (``--kubeconfig`` ...) and ``env`` (``NODE_NAME``) say."""

    def __init__(
        self,
        runtime: Containerd,
        workdir: Path,
        config: str | None,
        args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.runtime = runtime
        self.dir = workdir
        self.config = workdir / "config.yaml"
        self.args = args if config is None else ("--config-file", str(self.config), *args)
        self.env = dict(os.environ) | (env or {})
        if config is not None:
            self.config.write_text(config)
        self.log_path = workdir / "daemon.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, wait: bool = True) -> None:
        before = registrations(self.runtime)
        log = self.log_path.open("ab")
        argv = [
            sys.executable,
            "-m",
            "nri_resmgr",
            *self.args,
            "--nri-socket",
            self.runtime.nri_socket,
            "--log-level",
            "debug",
        ]
        self.proc = subprocess.Popen(argv, stdout=log, stderr=log, env=self.env)
        LIVE.add(self)
        log.close()
        if wait:
            self.wait_registered(before)

    def wait_registered(self, before: int) -> None:
        def done() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited {self.proc.returncode}:\n{self.log_tail()}")
            return registrations(self.runtime) > before

        wait_for("containerd to log our plugin synchronized", done)

    def terminate(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        finally:
            self.proc = None
            LIVE.discard(self)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        LIVE.discard(self)

    def log_tail(self, lines: int = 30) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])
