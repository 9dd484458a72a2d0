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
from array import array
from collections.abc import Callable

import trio

ENV = "NRI_RESMGR_REQUEST_TRACE"

_ns = time.perf_counter_ns
_cpu_ns = time.thread_time_ns


def _switches() -> tuple[int, int, int]:
    """This thread's involuntary and voluntary context switches and minor page faults."""
    u = resource.getrusage(resource.RUSAGE_THREAD)
    return u.ru_nivcsw, u.ru_nvcsw, u.ru_minflt


FIELDS = (
    "method", "inline", "sched_ns", "handle_ns", "wall_ns", "cpu_ns", "log_ns", "gc_n",
    "gc_ns", "gc_gen", "preempted", "waited", "minflt", "blocks",
)  # fmt: skip
"""One record's fields, in order. ``handle_ns`` ends when the reply is ready, ``wall_ns``
once it is written; ``gc_gen`` is the oldest generation collected (-1: none); ``blocks``
is ``sys.getallocatedblocks()`` when the request began."""


class RequestTrace(trio.abc.Instrument):
    """The recorder; also a trio instrument, for the loop's I/O wake-ups.

    Records go into one flat ``array('q')``, which grows outside the small-object heap,
    so that the trace itself does not show up as heap growth per request."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.methods: dict[str, int] = {}
        self.records = array("q")
        self.outside_gc = array("q")
        """(generation, ns) pairs of the collections outside any request."""
        self._woke = 0
        self._active = False
        self._state = [0] * len(FIELDS)
        self._t0 = 0
        self._cpu0 = 0
        self._ru0 = (0, 0, 0)
        self._gc_start = 0

    # -- trio instrument ------------------------------------------------------------------

    def after_io_wait(self, timeout: float) -> None:
        self._woke = _ns()

    # -- requests -------------------------------------------------------------------------

    def begin(self, method: str, path: str) -> None:
        st = self._state
        st[0] = self.methods.setdefault(method, len(self.methods))
        st[1] = path == "inline"
        st[6] = st[7] = st[8] = 0
        st[9] = -1
        st[13] = sys.getallocatedblocks()
        self._active = True
        self._ru0 = _switches()
        self._cpu0 = _cpu_ns()
        self._t0 = _ns()
        st[2] = self._t0 - self._woke if self._woke else -1

    def ready(self) -> None:
        """The reply is encoded; what follows is its write."""
        if self._active:
            self._state[3] = _ns() - self._t0

    def end(self) -> None:
        if not self._active:
            return
        st = self._state
        st[4] = _ns() - self._t0
        st[5] = _cpu_ns() - self._cpu0
        self._active = False
        if not st[3]:
            st[3] = st[4]
        ru = _switches()
        st[10], st[11], st[12] = (a - b for a, b in zip(ru, self._ru0, strict=True))
        self.records.extend(st)
        st[3] = 0

    # -- hooks ----------------------------------------------------------------------------

    def on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_start = _ns()
            return
        took = _ns() - self._gc_start
        if self._active:
            st = self._state
            st[7] += 1
            st[8] += took
            st[9] = max(st[9], info["generation"])
        else:
            self.outside_gc.extend((info["generation"], took))

    def timed_emit(self, emit: Callable[[logging.LogRecord], None]) -> Callable[..., None]:
        def emit_timed(record: logging.LogRecord) -> None:
            start = _ns()
            try:
                emit(record)
            finally:
                if self._active:
                    self._state[6] += _ns() - start

        return emit_timed

    def dump(self) -> None:
        names = {i: m for m, i in self.methods.items()}
        width = len(FIELDS)
        with open(self.path, "w", encoding="utf-8") as out:
            for k in range(0, len(self.records), width):
                rec = dict(zip(FIELDS, self.records[k : k + width], strict=True))
                rec["method"] = names[rec["method"]]  # type: ignore[assignment]
                out.write(json.dumps(rec) + "\n")
            pairs = list(zip(self.outside_gc[::2], self.outside_gc[1::2], strict=True))
            out.write(json.dumps({"outside_gc": pairs}) + "\n")


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


def uninstall() -> None:
    """Remove the trace (tests); call inside the same ``trio.run`` as the install."""
    global TRACE
    trace, TRACE = TRACE, None
    if trace is None:
        return
    trio.lowlevel.remove_instrument(trace)
    gc.callbacks.remove(trace.on_gc)
    atexit.unregister(trace.dump)
