"""The process contract (docs/getting-started.md, "Running the daemon by hand"): SIGINT like
SIGTERM, a second signal cancels without waiting, and an invalid initial configuration exits 2
with one line per problem."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from nri_resmgr.daemon import EXIT_OK, Daemon
from tests.foundation.test_process import CONFIGS, read_until, start


class StopNeverReturns:
    """Serves until cancelled; its stop() never returns, so only a cancel ends the daemon."""

    def __init__(self, name: str, journal: list[str]) -> None:
        self.name = name
        self.journal = journal
        self.stop_entered = trio.Event()

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await trio.sleep_forever()

    async def stop(self) -> None:
        self.journal.append(f"{self.name} stop entered")
        self.stop_entered.set()
        await trio.sleep_forever()


class Waits:
    """The daemon's event journal, with an event per awaited entry (no polling)."""

    def __init__(self) -> None:
        self.journal: list[str] = []
        self.running = trio.Event()

    def record(self, event: str) -> None:
        self.journal.append(event)
        if event == "running":
            self.running.set()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_a_second_signal_cancels_without_waiting_for_stop(
    sig: signal.Signals, caplog: pytest.LogCaptureFixture
) -> None:
    waits = Waits()
    stuck = StopNeverReturns("stuck", waits.journal)
    # A grace far longer than any test run: only the second signal can end this daemon.
    daemon = Daemon([stuck], grace=1e9, on_event=waits.record)
    code: list[int] = []

    async def run() -> None:
        code.append(await daemon.run())

    with trio.fail_after(60):  # a guard against a hang, not a timing check
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            await waits.running.wait()
            os.kill(os.getpid(), sig)
            await stuck.stop_entered.wait()
            os.kill(os.getpid(), sig)
    assert code == [EXIT_OK]
    assert daemon.shutdown_reason == f"received {sig.name}"
    assert "grace expired" not in waits.journal
    assert "stopped stuck" not in waits.journal
    assert waits.journal[-1] == "exit 0"
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [f"second {sig.name}: cancelling without waiting for services"]


def test_sigint_stops_the_process_cleanly_like_sigterm(tmp_path: Path) -> None:
    proc = start("--config-file", str(CONFIGS / "template.yaml"), "--nri-socket",
                 str(tmp_path / "none.sock"))  # fmt: skip
    try:
        read_until(proc, "started config-file")
        proc.send_signal(signal.SIGINT)
        _, rest = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0, rest
    assert "shutting down: received SIGINT" in rest
    assert rest.index("stopping config-file") < rest.index("stopping nri")
    assert "Traceback" not in rest and "KeyboardInterrupt" not in rest


THREE_PROBLEMS = """\
apiVersion: config.nri/v1alpha1
kind: TopologyAwarePolicy
spec:
  reservedResources: {cpu: 750m, gpu: 1}
  availableResources: {cpus: "cpuset:0"}
  pinCPU: yes
"""


def test_an_invalid_initial_config_exits_2_with_one_line_per_problem(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(THREE_PROBLEMS)
    proc = subprocess.run(
        [sys.executable, "-m", "nri_resmgr", "--config-file", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    problems = [
        line.split("configuration error: ", 1)[1]
        for line in proc.stderr.splitlines()
        if "configuration error: " in line
    ]
    assert sorted(problems) == [
        "spec.availableResources.cpus: unknown key",
        "spec.pinCPU: expected a boolean, got 'yes'",
        "spec.reservedResources.gpu: unknown key",
    ]
    assert "Traceback" not in proc.stderr
