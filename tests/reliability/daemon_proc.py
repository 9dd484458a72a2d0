"""The real daemon as a child process (file mode, topology-aware, synthetic sysfs), and its
resident memory as the kernel reports it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CONFIG = """\
apiVersion: config.nri/v1alpha1
kind: TopologyAwarePolicy
metadata: {name: default}
spec: {reservedResources: {cpu: "cpuset:0"}}
"""


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


@contextmanager
def daemon_process(
    workdir: Path, socket: str, host_root: Path, *, config: str = CONFIG
) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m nri_resmgr`` against ``socket``; SIGTERM and reaped on the way out."""
    path = workdir / "config.yaml"
    path.write_text(config)
    log = (workdir / "daemon.log").open("wb")
    argv = [sys.executable, "-m", "nri_resmgr", "--config-file", str(path),
            "--nri-socket", socket, "--host-root", str(host_root),
            "--log-level", "warning"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log, env=dict(os.environ))
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
