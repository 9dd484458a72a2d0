"""The supervision tree: a fatal task failure and SIGTERM unwind along the same path."""

from __future__ import annotations

import os
import signal
from typing import Any

import trio

from nri_resmgr.daemon import EXIT_FATAL, EXIT_OK, Daemon
from nri_resmgr.errors import Fatal


class RecordingService:
    """Serves until cancelled (or fails when told to) and records what happens to it."""

    def __init__(self, name: str, journal: list[str]) -> None:
        self.name = name
        self.journal = journal
        self.fail = trio.Event()
        self.stop_calls = 0

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        self.journal.append(f"{self.name} serving")
        task_status.started()
        try:
            await self.fail.wait()
            raise Fatal(f"{self.name} gave up")
        finally:
            self.journal.append(f"{self.name} unwound")

    async def stop(self) -> None:
        self.stop_calls += 1
        self.journal.append(f"{self.name} stop")
        await trio.sleep(0)


async def run_daemon(trigger: str) -> tuple[int, list[str], Daemon]:
    journal: list[str] = []
    services = [RecordingService(n, journal) for n in ("nri", "dra", "publisher")]
    daemon = Daemon(services, grace=5, on_event=journal.append)
    async with trio.open_nursery() as nursery:

        async def run() -> None:
            nonlocal code
            code = await daemon.run()

        code = -1
        nursery.start_soon(run)
        await wait_for(lambda: "running" in journal)
        if trigger == "signal":
            os.kill(os.getpid(), signal.SIGTERM)
        else:
            services[1].fail.set()
    return code, journal, daemon


async def wait_for(predicate: Any) -> None:
    with trio.fail_after(5):
        while not predicate():
            await trio.sleep(0.001)


async def test_sigterm_exits_zero_after_stopping_services_in_reverse() -> None:
    code, journal, daemon = await run_daemon("signal")
    assert code == EXIT_OK
    assert daemon.shutdown_reason == "received SIGTERM"
    stops = [e for e in journal if e.endswith(" stop")]
    assert stops == ["publisher stop", "dra stop", "nri stop"]


async def test_fatal_failure_exits_non_zero() -> None:
    code, _, daemon = await run_daemon("fatal")
    assert code == EXIT_FATAL
    assert daemon.shutdown_reason == "dra failed: dra gave up"


async def test_fatal_and_signal_unwind_identically() -> None:
    _, by_signal, _ = await run_daemon("signal")
    _, by_fatal, _ = await run_daemon("fatal")

    def shape(journal: list[str]) -> list[str]:
        # The failing service unwinds first because its own task ended; everything that the
        # shutdown path does (its events and their order) must match.
        return [e for e in journal if not e.endswith("unwound") and not e.startswith("exit")]

    assert shape(by_signal) == shape(by_fatal)
    assert shape(by_signal) == [
        "nri serving", "dra serving", "publisher serving", "running",
        "shutdown requested",
        "stopping publisher", "publisher stop", "stopped publisher",
        "stopping dra", "dra stop", "stopped dra",
        "stopping nri", "nri stop", "stopped nri",
        "cancel root",
    ]  # fmt: skip
    assert by_signal[-1] == "exit 0"
    assert by_fatal[-1] == "exit 1"


class FailsBeforeStarted:
    name = "broken"

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        raise Fatal("cannot bind")

    async def stop(self) -> None:
        pass


async def test_failure_before_started_is_fatal_and_later_services_do_not_start() -> None:
    journal: list[str] = []
    later = RecordingService("later", journal)
    daemon = Daemon([FailsBeforeStarted(), later], grace=1)
    assert await daemon.run() == EXIT_FATAL
    assert daemon.shutdown_reason == "broken failed: cannot bind"
    assert "later serving" not in journal


class HangsOnStop(RecordingService):
    async def stop(self) -> None:
        self.journal.append(f"{self.name} stop")
        await trio.sleep_forever()


async def test_grace_period_bounds_a_stop_that_hangs() -> None:
    journal: list[str] = []
    daemon = Daemon([HangsOnStop("stuck", journal)], grace=0.05, on_event=journal.append)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(daemon.run)
        await wait_for(lambda: "running" in journal)
        daemon.request_shutdown("test", fatal=False)
    assert "grace expired" in journal
    assert journal[-1] == "exit 0"


async def test_second_request_keeps_the_first_reason() -> None:
    journal: list[str] = []
    svc = RecordingService("a", journal)
    daemon = Daemon([svc], grace=1, on_event=journal.append)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(daemon.run)
        await wait_for(lambda: "running" in journal)
        daemon.request_shutdown("first", fatal=False)
        daemon.request_shutdown("second", fatal=True)
    assert daemon.shutdown_reason == "first"
    assert daemon.exit_code == EXIT_OK
    assert svc.stop_calls == 1
