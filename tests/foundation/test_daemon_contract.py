"""What the daemon tells the operator, and ``until_signalled``, in-process.

The log lines are part of the contract (docs/troubleshooting.md quotes them; process tests grep for
them). (Written to kill the mutants `nox -s mutation` found surviving in daemon.py.)
"""

from __future__ import annotations

import logging
import os
import signal
from typing import Any

import pytest
import trio

from nri_resmgr.daemon import EXIT_FATAL, EXIT_OK, Daemon, until_signalled

GUARD = 30  # a hang guard only


class Service:
    def __init__(self, name: str, *, fail: bool = False, stop_hangs: bool = False) -> None:
        self.name = name
        self.fail = fail
        self.stop_hangs = stop_hangs

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        if self.fail:
            await trio.lowlevel.checkpoint()
            raise RuntimeError("boom")
        await trio.sleep_forever()

    async def stop(self) -> None:
        if self.stop_hangs:
            await trio.sleep_forever()


class Returns(Service):
    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()


def daemon_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "nri_resmgr.daemon"]


def test_a_new_daemon_has_a_ten_second_grace_and_no_reason_yet() -> None:
    daemon = Daemon([])
    assert (daemon.grace, daemon.exit_code, daemon.shutdown_reason) == (10.0, EXIT_OK, None)


async def test_a_clean_lifecycle_is_logged_line_by_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="nri_resmgr.daemon")
    running = trio.Event()
    daemon = Daemon(
        [Service("a"), Service("b")], on_event=lambda e: e == "running" and running.set()
    )
    with trio.fail_after(GUARD):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(daemon.run)
            await running.wait()
            daemon.request_shutdown("test", fatal=False)
            daemon.request_shutdown("again", fatal=True)
    assert daemon_lines(caplog) == [
        ("INFO", "started a"),
        ("INFO", "started b"),
        ("INFO", "shutting down: test"),
        ("INFO", "shutdown already in progress; also: again"),
        ("INFO", "stopping b"),
        ("INFO", "stopping a"),
        ("INFO", "exiting with code 0"),
    ]


async def test_a_failing_service_is_an_error_with_its_traceback_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="nri_resmgr.daemon")
    daemon = Daemon([Service("a"), Service("b", fail=True)])
    with trio.fail_after(GUARD):
        assert await daemon.run() == EXIT_FATAL
    lines = daemon_lines(caplog)
    assert ("ERROR", "shutting down: b failed: boom") in lines
    assert lines[-1] == ("INFO", "exiting with code 1")
    [debug] = [
        r for r in caplog.records if r.levelname == "DEBUG" and r.name == "nri_resmgr.daemon"
    ]
    assert debug.getMessage() == "b failed"
    assert debug.exc_info is not None and debug.exc_info[0] is RuntimeError


async def test_a_service_that_stops_serving_on_its_own_is_fatal() -> None:
    daemon = Daemon([Returns("quitter")])
    with trio.fail_after(GUARD):
        assert await daemon.run() == EXIT_FATAL
    assert daemon.shutdown_reason == "quitter stopped serving"


async def test_an_expired_grace_is_a_warning_naming_it(caplog: pytest.LogCaptureFixture) -> None:
    running = trio.Event()
    daemon = Daemon([Service("stuck", stop_hangs=True)], grace=0.05,
                    on_event=lambda e: e == "running" and running.set())  # fmt: skip
    with trio.fail_after(GUARD):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(daemon.run)
            await running.wait()
            daemon.request_shutdown("test", fatal=False)
    assert ("WARNING", "services did not stop within 0.1s; cancelling them") in daemon_lines(caplog)


async def test_until_signalled_returns_the_result() -> None:
    async def work() -> int:
        await trio.lowlevel.checkpoint()
        return 7

    assert await until_signalled(work) == 7


async def test_until_signalled_reraises_the_error_itself() -> None:
    async def work() -> int:
        await trio.lowlevel.checkpoint()
        raise KeyError("k")

    with pytest.raises(KeyError):
        await until_signalled(work)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_a_signal_before_start_up_finished_returns_none(
    sig: signal.Signals, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="nri_resmgr.daemon")
    waiting = trio.Event()

    async def work() -> int:
        waiting.set()
        await trio.sleep_forever()
        return 0

    async def send() -> None:
        await waiting.wait()
        os.kill(os.getpid(), sig)

    with trio.fail_after(GUARD):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            assert await until_signalled(work) is None
    assert ("INFO", f"received {sig.name} before start-up finished: exiting") in daemon_lines(
        caplog
    )
