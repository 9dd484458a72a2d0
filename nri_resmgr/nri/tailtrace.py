"""An opt-in per-request trace of the NRI plugin service, to find where latency tails come from.

Set ``NRI_RESMGR_REQUEST_TRACE=PATH`` and the daemon records, for every ttrpc request it
answers: the method, whether it was answered inline or in a task, the wall time from the
trio loop's last wake-up from I/O (``after_io_wait``) to the handler's start (scheduling
delay) and from the handler's start to the reply's write, the handler thread's CPU time
(``time.thread_time``) over the same span, every garbage collection that ran inside it
(generation, duration), the time spent in log handlers, and the interpreter's allocated
block count at the end (heap growth per lifecycle). Collections outside any request are
recorded too. The records are written as JSON lines to PATH when the process exits, never
while serving, so that the trace perturbs nothing but a few clock reads per request.

Unset (the default) nothing is installed: ``TRACE`` is None and each request pays one
global read. ``tests/bench/tail.py`` drives it and correlates the slow requests.
"""

from __future__ import annotations

import atexit
import gc
import json
import logging
import os
import resource
import sys
import time
from collections.abc import Callable
from typing import Any

import trio

ENV = "NRI_RESMGR_REQUEST_TRACE"

_ns = time.perf_counter_ns
_cpu_ns = time.thread_time_ns


def _switches() -> tuple[int, int, int]:
    """This thread's involuntary and voluntary context switches and minor page faults."""
    u = resource.getrusage(resource.RUSAGE_THREAD)
    return u.ru_nivcsw, u.ru_nvcsw, u.ru_minflt


class RequestTrace(trio.abc.Instrument):
    """The recorder; also a trio instrument, for the loop's I/O wake-ups."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.records: list[dict[str, Any]] = []
        self.outside_gc: list[dict[str, Any]] = []
        self._woke = 0
        self._current: dict[str, Any] | None = None
        self._gc_start = 0
        self._log_ns = 0

    # -- trio instrument ------------------------------------------------------------------

    def after_io_wait(self, timeout: float) -> None:
        self._woke = _ns()

    # -- requests -------------------------------------------------------------------------

    def begin(self, method: str, path: str) -> None:
        now = _ns()
        self._log_ns = 0
        self._current = {
            "method": method,
            "path": path,
            "sched_ns": now - self._woke if self._woke else None,
            "t0": now,
            "cpu0": _cpu_ns(),
            "ru0": _switches(),
            "gc": [],
        }

    def abandon(self) -> None:
        """The request went to the task path after all: its task records it."""
        self._current = None

    def end(self) -> None:
        rec = self._current
        if rec is None:
            return
        self._current = None
        rec["wall_ns"] = _ns() - rec.pop("t0")
        rec["cpu_ns"] = _cpu_ns() - rec.pop("cpu0")
        rec["log_ns"] = self._log_ns
        ru = _switches()
        rec["preempted"], rec["waited"], rec["minflt"] = (
            a - b for a, b in zip(ru, rec.pop("ru0"), strict=True)
        )
        rec["blocks"] = sys.getallocatedblocks()
        rec["gc_count"] = gc.get_count()
        self.records.append(rec)

    # -- hooks ----------------------------------------------------------------------------

    def on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_start = _ns()
            return
        event = {
            "gen": info["generation"],
            "ns": _ns() - self._gc_start,
            "collected": info["collected"],
        }
        if self._current is not None:
            self._current["gc"].append(event)
        else:
            self.outside_gc.append(event)

    def timed_emit(self, emit: Callable[[logging.LogRecord], None]) -> Callable[..., None]:
        def emit_timed(record: logging.LogRecord) -> None:
            start = _ns()
            try:
                emit(record)
            finally:
                self._log_ns += _ns() - start

        return emit_timed

    def dump(self) -> None:
        with open(self.path, "w", encoding="utf-8") as out:
            for rec in self.records:
                out.write(json.dumps(rec) + "\n")
            out.write(json.dumps({"outside_gc": self.outside_gc}) + "\n")


TRACE: RequestTrace | None = None


def install_from_env() -> None:
    """Install the trace if ``NRI_RESMGR_REQUEST_TRACE`` names a file; call inside trio.run,
    after logging is set up."""
    global TRACE
    path = os.environ.get(ENV, "")
    if not path or TRACE is not None:
        return
    trace = RequestTrace(path)
    trio.lowlevel.add_instrument(trace)
    gc.callbacks.append(trace.on_gc)
    for handler in logging.getLogger().handlers:
        handler.emit = trace.timed_emit(handler.emit)  # type: ignore[method-assign]
    atexit.register(trace.dump)
    TRACE = trace
    logging.getLogger(__name__).info("request trace on: written to %s at exit", path)
