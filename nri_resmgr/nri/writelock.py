"""A write lock that does not yield when nobody holds it.

``trio.Lock`` makes every acquisition a checkpoint, so a reply that passes the mux send lock
(then also a ttrpc writer lock) paid extra trips through the scheduler before the socket
write. On the CreateContainer path, under load, those trips were measurable
(``nox -s bench``). This lock only parks when it is held, and hands ownership
straight to the first waiter on release (first come, first served, as with trio's).
"""

from __future__ import annotations

from types import TracebackType

import trio


class WriteLock:
    def __init__(self) -> None:
        self._held = False
        self._waiters = trio.lowlevel.ParkingLot()

    def acquire_nowait(self) -> bool:
        """Take the lock if it is free (True); the taker must ``release`` it, from any task
        (a synchronous writer hands a write it could not finish to a task this way)."""
        if self._held:
            return False
        self._held = True
        return True

    def release(self) -> None:
        if self._waiters:
            self._waiters.unpark()
        else:
            self._held = False

    async def __aenter__(self) -> None:
        if self._held:
            # Released to us by release(), which leaves _held set: ownership is handed over.
            await self._waiters.park()
        else:
            self._held = True

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def locked(self) -> bool:
        return self._held
