"""Work that must not delay an answer, done once the answer is out.

Two costs used to land inside whichever NRI request happened to trigger them:

- the log line of each container event (formatted and written to stderr before the reply);
- the cyclic garbage collector, whose young-generation collections run when enough objects
  were allocated, i.e. in the middle of a request (a generation-1 collection at 500 live
  containers took ~1 ms, measured with ``tests/bench/tail.py``).

``AfterReply`` drains the log handler's kept records (``nri_resmgr.log.AfterReplyHandler``)
and runs the collection that is due, at two points:

- the NRI trunk reader (``Mux``) brackets each batch of frames it hands out with
  ``begin_batch``/``end_batch``; the container events are answered inline inside the
  batch, so ``end_batch`` comes right after their replies were written, in the same task,
  with no trip through the scheduler (a wake-up task there cost ~80 µs CPU per lifecycle);
- otherwise (a reply written by a handler task, a log line from any other task) a trio
  system task is woken and does it at the scheduler's next turn: the ttrpc server calls
  ``after_reply()`` once each reply is written, which wakes it when a collection is due,
  and the log handler wakes it on the first kept record.

Either way it happens after the reply, while the runtime, which sends NRI events one at a
time and waits for each answer, is busy with the answer.

The collector's automatic threshold is raised (``SAFETY_FACTOR`` times the normal one), so
that code which allocates a lot without answering anything (a Synchronize of thousands of
containers) is still collected, only less often; everything else is collected here at the
normal threshold, choosing the generation as CPython does.
"""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import Mapping

import trio

from nri_resmgr.log import AfterReplyHandler, after_reply_handler

log = logging.getLogger(__name__)

ENV = "NRI_RESMGR_AFTER_REPLY"
"""``0`` leaves log lines and collections where they fall (to measure the difference in
``tests/bench/tail.py``); anything else, or unset, installs ``AfterReply``."""
SAFETY_FACTOR = 10
"""How many times the normal generation-0 threshold may pile up without a reply before the
interpreter collects by itself (inside whatever runs then)."""


class AfterReply:
    def __init__(self, handler: AfterReplyHandler | None) -> None:
        self._handler = handler
        self._lot = trio.lowlevel.ParkingLot()
        self._woken = False
        self._in_batch = False
        self.thresholds = gc.get_threshold()
        """The collector's thresholds before ``install`` raised generation 0's."""
        self.collections = [0, 0, 0]
        """Collections run here, by generation (for tests and logs)."""

    def wake(self) -> None:
        if self._in_batch:
            return  # end_batch does it, with no trip through the scheduler
        if not self._woken:
            self._woken = True
            self._lot.unpark()

    def begin_batch(self) -> None:
        """The NRI reader is about to hand a batch of frames to their handlers; inline
        handlers answer them before ``end_batch``."""
        self._in_batch = True

    def end_batch(self) -> None:
        """The batch was answered (inline) or handed to tasks: do what is due, here."""
        self._in_batch = False
        if self._handler is not None:
            self._handler.drain()
        self.collect_if_due()

    def after_reply(self) -> None:
        """A reply was written: wake the task if a collection is due."""
        if gc.get_count()[0] >= self.thresholds[0]:
            self.wake()

    async def run(self) -> None:
        try:
            while True:
                if not self._woken:
                    await self._lot.park()
                self._woken = False
                if self._handler is not None:
                    self._handler.drain()
                self.collect_if_due()
                # One pass per turn: a wake-up during this pass comes round again.
                await trio.lowlevel.checkpoint()
        finally:
            self._uninstall()

    def _uninstall(self) -> None:
        global CURRENT
        if self._handler is not None:
            self._handler.defer(None)
        gc.set_threshold(*self.thresholds)
        if CURRENT is self:
            CURRENT = None

    def collect_if_due(self) -> None:
        """The collection the interpreter would have run by itself at the normal thresholds."""
        count = gc.get_count()
        t0, t1, t2 = self.thresholds
        if t0 <= 0 or count[0] < t0:
            return
        # CPython's own choice (gc_collect_generations), less its long-lived-ratio
        # condition on full collections: after gc.freeze those walk only the unfrozen heap.
        generation = 2 if count[2] > t2 else 1 if count[1] > t1 else 0
        gc.collect(generation)
        self.collections[generation] += 1


CURRENT: AfterReply | None = None


def install() -> AfterReply:
    """Start the task (call inside ``trio.run``): from now on log lines of the trio thread
    and due collections wait for the end of the current request."""
    global CURRENT
    if CURRENT is not None:
        return CURRENT
    handler = after_reply_handler()
    after = AfterReply(handler)
    t0, t1, t2 = after.thresholds
    if t0 > 0:  # gc.set_threshold(0) means "no automatic collection": leave it so
        gc.set_threshold(t0 * SAFETY_FACTOR, t1, t2)
    if handler is not None:
        handler.defer(after.wake)
    trio.lowlevel.spawn_system_task(after.run, name="after-reply")
    CURRENT = after
    return after


def install_from_env(env: Mapping[str, str] | None = None) -> AfterReply | None:
    """``install``, unless ``NRI_RESMGR_AFTER_REPLY=0`` (then None, and a log line)."""
    if (os.environ if env is None else env).get(ENV, "1") == "0":
        log.info("%s=0: log lines and garbage collections run inside requests", ENV)
        return None
    return install()
