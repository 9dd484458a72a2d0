"""Active retry of unsolicited container updates (UpdateContainers) the runtime failed.

Without it a failed update was sent again only when some later event produced updates, so
after a timeout (a runtime slower than our deadline under load) a container could stay on
CPUs the policy had given to another until something else happened on the node.

What is re-sent is never the Update that failed: each round asks the policy, under the
manager lock, what it wants for those containers *now* (``Policy.retry_updates``): a
container may have moved again meanwhile, or gone, and then has nothing to send. The lock is
released before the runtime is waited on, so NRI and DRA requests are served meanwhile.

A container leaves the retry when an update for it is applied (a retry's or any later
one's), when the policy has nothing to send for it (removed, stopped), or after
``GIVE_UP_AFTER`` failed retries: the policy still holds its cpuset as unknown, so the next
update the policy sends for it tries again. Everything pending is dropped when the runtime
connection ends: the next connection's Synchronize hands the policy the runtime's truth.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence

import attrs
import trio

from nri_resmgr.backoff import Backoff
from nri_resmgr.instrumentation.metrics import count_update_retry

log = logging.getLogger(__name__)

# The first retry a second after the failure, then doubling to a minute: a runtime that
# timed out under load gets time to catch up; ten retries span about five minutes.
RETRY_INITIAL = 1.0
RETRY_MAXIMUM = 60.0
GIVE_UP_AFTER = 10

Resend = Callable[[Sequence[str]], Awaitable[set[str]]]
"""Sends the policy's current wanted state for these containers; returns the ids it sent
an update for (whether the runtime applied it is told through ``UpdateRetry.failed``)."""


def default_backoff() -> Backoff:
    return Backoff(initial=RETRY_INITIAL, maximum=RETRY_MAXIMUM)


@attrs.define
class _Pending:
    retries: int = 0
    """Retries of this container that failed so far."""
    failed: bool = True
    """Failed since the current round began (or since it joined, before any round)."""


class UpdateRetry:
    """The containers whose update failed, and the loop that re-sends them.

    One backoff for the whole set: a round re-sends every pending container, the delay
    grows while any of them keeps failing and starts again from ``initial`` once none is
    left. ``run`` lives in the NRI session's nursery, so it ends with the connection.
    """

    def __init__(
        self,
        backoff: Callable[[], Backoff] = default_backoff,
        give_up_after: int = GIVE_UP_AFTER,
    ) -> None:
        self._new_backoff = backoff
        self._give_up_after = give_up_after
        self._pending: dict[str, _Pending] = {}
        self._wake = trio.Event()

    def pending(self) -> list[str]:
        return sorted(self._pending)

    def failed(self, container_ids: Iterable[str]) -> None:
        """The runtime did not apply the updates sent for these containers."""
        for cid in container_ids:
            count_update_retry("failed")
            entry = self._pending.get(cid)
            if entry is None:
                log.warning("runtime failed to update container %s; retrying with backoff", cid)
                self._pending[cid] = _Pending()
            else:
                entry.failed = True
        if self._pending:
            self._wake.set()

    def clear(self) -> None:
        """Forget every pending container (the runtime connection ended)."""
        if self._pending:
            log.info(
                "runtime connection ended with %d container updates to retry; the next "
                "Synchronize covers them",
                len(self._pending),
            )
        self._pending.clear()

    async def run(self, resend: Resend) -> None:
        """Re-send pending containers with backoff, for ever (cancel to stop)."""
        backoff = self._new_backoff()
        while True:
            if not self._pending:
                backoff = self._new_backoff()
                self._wake = trio.Event()
                await self._wake.wait()
            await backoff.sleep()
            if self._pending:
                await self._round(resend)

    async def _round(self, resend: Resend) -> None:
        ids = sorted(self._pending)
        for cid in ids:
            self._pending[cid].failed = False
        sent = await resend(ids)
        for cid in ids:
            entry = self._pending.get(cid)
            if entry is None:  # cleared meanwhile
                continue
            if entry.failed:
                self._failed_again(cid, entry)
            elif cid in sent:
                del self._pending[cid]
                count_update_retry("ok")
                log.info("container %s updated on retry %d", cid, entry.retries + 1)
            else:
                del self._pending[cid]
                count_update_retry("dropped")
                log.debug("container %s: nothing left to retry (removed or updated since)", cid)

    def _failed_again(self, cid: str, entry: _Pending) -> None:
        entry.retries += 1
        if entry.retries < self._give_up_after:
            return
        del self._pending[cid]
        count_update_retry("given_up")
        log.error(
            "giving up updating container %s after %d failed retries; the policy's next "
            "update for it will try again",
            cid,
            entry.retries,
        )
