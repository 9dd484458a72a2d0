"""Log lines and due garbage collections of a request come after its reply is written, on
the real NRI path (unix socket, mux, ttrpc, inline handlers); order and content are kept."""

from __future__ import annotations

import gc
import io
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
import trio

from nri_resmgr.log import AfterReplyHandler, info_later
from nri_resmgr.nri import afterreply
from nri_resmgr.nri.mux import Mux
from nri_resmgr.resmgr.model import Adjustment, Container, Pod, Update
from nri_resmgr.sim.runtime import Simulator
from tests.nri.helpers import PinningPolicy, container, make_manager, pod, running_service

GUARD = 10  # a hang guard only
events: list[str] = []
log = logging.getLogger("nri_resmgr.test.afterreply")


class _Stream(io.StringIO):
    def write(self, s: str) -> int:
        events.append(f"log {s.strip()}")
        return super().write(s)


class LoggingPolicy(PinningPolicy):
    """Logs one line per create and leaves enough new objects behind to make a
    generation-0 collection due (fewer than the raised automatic threshold)."""

    def __init__(self) -> None:
        super().__init__()
        self.kept: list[Any] = []

    def create_container(self, pod: Pod, container: Container) -> tuple[Adjustment, list[Update]]:
        events.append(f"decide {container.id}")
        log.info("placed %s", container.id)
        self.kept.append([[] for _ in range(2 * gc.get_threshold()[0] // 10)])
        return super().create_container(pod, container)


@pytest.fixture
def handler() -> Iterator[AfterReplyHandler]:
    events.clear()
    h = AfterReplyHandler(_Stream())
    h.setFormatter(logging.Formatter("%(message)s"))
    root = logging.getLogger()
    # Alone on the root logger: a handler that an earlier test's setup_logging left there
    # would be the one install() finds and defers.
    kept, root.handlers = root.handlers, [h]
    old_level = log.level
    log.setLevel(logging.INFO)
    try:
        yield h
    finally:
        root.handlers = kept
        log.setLevel(old_level)


def _record_replies(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every reply written inline (by ``Mux.send_frames_nowait``) leaves an event."""
    original = Mux.send_frames_nowait

    def send(self: Mux, frames: bytes) -> Any:
        rest = original(self, frames)
        events.append("reply written")
        return rest

    monkeypatch.setattr(Mux, "send_frames_nowait", send)


def _on_gc(phase: str, info: dict[str, int]) -> None:
    if phase == "start":
        events.append(f"gc{info['generation']}")


async def test_log_lines_and_collections_come_after_the_reply(
    sock_path: str, handler: AfterReplyHandler, monkeypatch: pytest.MonkeyPatch
) -> None:
    _record_replies(monkeypatch)
    policy = LoggingPolicy()
    before = gc.get_threshold()
    after = afterreply.install()
    assert gc.get_threshold()[0] == before[0] * afterreply.SAFETY_FACTOR
    gc.callbacks.append(_on_gc)
    try:
        with trio.fail_after(GUARD):
            manager = make_manager(policy)
            async with Simulator.listen(sock_path) as sim, running_service(manager, sock_path):
                await sim.wait_plugin()
                await sim.run_pod_sandbox(pod())
                for i in range(6):
                    await sim.create_container(pod(), container(i))
    finally:
        gc.callbacks.remove(_on_gc)
    mine = [e for e in events if e.startswith(("decide", "log placed", "reply", "gc"))]
    for i in range(6):
        at = mine.index(f"decide ctr{i}")
        assert mine[at + 1] == "reply written", mine[at : at + 3]
        assert f"log placed ctr{i}" in mine[at + 2 :], "the line is written, after the reply"
    lines = [e for e in mine if e.startswith("log placed")]
    assert lines == [f"log placed ctr{i}" for i in range(6)], "in order, each once"
    # No collection between a decision and its reply: each one ran after a reply.
    for k, e in enumerate(mine):
        if e.startswith("gc"):
            assert not mine[k - 1].startswith("decide"), mine[k - 3 : k + 1]
    assert sum(after.collections) >= 3, "the due collections ran here"


async def test_without_after_reply_the_line_is_written_inside_the_request(
    sock_path: str, handler: AfterReplyHandler, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control: the same path, NRI_RESMGR_AFTER_REPLY=0."""
    _record_replies(monkeypatch)
    assert afterreply.install_from_env({afterreply.ENV: "0"}) is None
    assert afterreply.CURRENT is None
    with trio.fail_after(GUARD):
        manager = make_manager(LoggingPolicy())
        async with Simulator.listen(sock_path) as sim, running_service(manager, sock_path):
            await sim.wait_plugin()
            await sim.run_pod_sandbox(pod())
            await sim.create_container(pod(), container(0))
    at = events.index("decide ctr0")
    assert events[at + 1 : at + 3] == ["log placed ctr0", "reply written"]


async def test_the_task_drains_lines_logged_outside_any_batch(handler: AfterReplyHandler) -> None:
    afterreply.install()
    log.info("from a task")
    assert handler.pending() == 1 and not [e for e in events if e.startswith("log")]
    await trio.sleep(0)  # one scheduler turn
    await trio.sleep(0)
    assert events == ["log from a task"] and handler.pending() == 0


def test_outside_deferral_lines_are_written_at_once_and_close_drains() -> None:
    events.clear()
    h = AfterReplyHandler(_Stream())
    h.setFormatter(logging.Formatter("%(message)s"))
    record = logging.makeLogRecord({"msg": "one"})
    h.handle(record)
    assert events == ["log one"]
    h.defer(lambda: events.append("woken"))
    h.handle(logging.makeLogRecord({"msg": "two"}))
    h.handle(logging.makeLogRecord({"msg": "three"}))
    assert events == ["log one", "woken"], "kept; woken once, for the first"
    h.close()
    assert events == ["log one", "woken", "log two", "log three"]


def test_the_due_generation_is_chosen_as_cpython_chooses_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    after = afterreply.AfterReply(None)
    after.thresholds = (700, 10, 10)
    collected: list[int] = []
    monkeypatch.setattr(gc, "collect", lambda generation=2: collected.append(generation) or 0)
    for counts in [(699, 10, 10), (700, 3, 0), (700, 11, 0), (700, 0, 11), (700, 11, 11)]:
        monkeypatch.setattr(gc, "get_count", lambda c=counts: c)
        after.collect_if_due()
    assert collected == [0, 1, 2, 2]


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_info_later_makes_its_record_at_the_drain_with_the_time_of_the_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events.clear()
    h = AfterReplyHandler(_Stream())
    h.setFormatter(logging.Formatter("%(message)s"))
    kept = _Kept()
    made: list[str] = []
    original = logging.Logger.makeRecord
    monkeypatch.setattr(
        logging.Logger,
        "makeRecord",
        lambda self, *a, **k: made.append(a[4]) or original(self, *a, **k),
    )
    root = logging.getLogger()
    old_handlers, root.handlers = root.handlers, [h]
    log.addHandler(kept)
    old_level, log.level = log.level, logging.INFO
    try:
        h.defer(lambda: events.append("woken"))
        at = time.time()
        info_later(log, "placed %s in %s", "ctr0", "pool0")
        log.info("at once")  # an ordinary record is kept whole, after the call
        assert made == ["at once"], "no record made for the info_later call yet"
        assert events == ["woken"] and h.pending() == 2
        time.sleep(0.01)
        h.drain()
        assert events == ["woken", "log placed ctr0 in pool0", "log at once"], "in call order"
        assert made == ["at once", "placed %s in %s"]
        # (``kept`` does not defer: it had the ordinary record at once.)
        assert [r.getMessage() for r in kept.records] == ["at once", "placed ctr0 in pool0"]
        first = kept.records[1]
        assert (first.getMessage(), first.levelno, first.name) == (
            "placed ctr0 in pool0",
            logging.INFO,
            log.name,
        )
        assert at <= first.created < at + 0.009, "the time of the call, not of the drain"
        assert first.msecs == pytest.approx((first.created * 1000) % 1000, abs=1)
        log.setLevel(logging.WARNING)
        info_later(log, "filtered")
        assert h.pending() == 0, "below the logger's level nothing is kept"
    finally:
        h.close()
        root.handlers = old_handlers
        log.removeHandler(kept)
        log.setLevel(old_level)


def test_info_later_without_deferral_logs_at_once(caplog: pytest.LogCaptureFixture) -> None:
    h = AfterReplyHandler(_Stream())
    h.defer(lambda: None)
    h.close()  # a closed handler defers nothing any more
    with caplog.at_level(logging.INFO, logger=log.name):
        info_later(log, "now %d", 1)
    assert [r.getMessage() for r in caplog.records] == ["now 1"]
