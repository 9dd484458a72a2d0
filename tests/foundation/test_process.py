"""The daemon as a process: waiting for a missing NRI socket, then SIGTERM → exit 0."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

CONFIGS = Path(__file__).parent / "configs"


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "nri_resmgr", *args],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )


def read_until(proc: subprocess.Popen[str], needle: str, timeout: float = 20) -> list[str]:
    assert proc.stderr is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        if needle in line:
            return lines
    raise AssertionError(f"{needle!r} not logged; got:\n{''.join(lines)}")


def test_missing_socket_is_reported_and_sigterm_exits_zero(tmp_path: Path) -> None:
    sock = tmp_path / "nonexistent.sock"
    proc = start("--config-file", str(CONFIGS / "template.yaml"), "--nri-socket", str(sock))
    try:
        read_until(proc, f"NRI socket {sock} does not exist")
        read_until(proc, "started config-file")
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0, rest
    assert "shutting down: received SIGTERM" in rest
    assert rest.index("stopping config-file") < rest.index("stopping nri")


def test_bad_config_file_exits_2_naming_the_path(tmp_path: Path) -> None:
    proc = start("--config-file", str(CONFIGS / "bad" / "wrong-bool.yaml"))
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 2
    assert "spec.dra.enabled: expected a boolean, got 'yes'" in err


def test_dra_enabled_with_a_local_file_warns_and_stays_off(tmp_path: Path) -> None:
    proc = start(
        "--config-file",
        str(CONFIGS / "topology-aware.yaml"),
        "--nri-socket",
        str(tmp_path / "none.sock"),
        "--policy",
        "topology-aware",
    )
    try:
        lines = read_until(proc, "DRA stays off")
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert any("no cluster access" in line for line in lines)
