"""The supervision tree: one root nursery, one way to shut down.

Services start in order under the root nursery. Shutdown has one entry point,
``request_shutdown``, used by the signal watcher and by any service that fails, so SIGTERM
and a fatal error unwind along the same path: stop the services in reverse start order
(within the grace period), then cancel the root scope. Only the reason and the exit code
differ. Recoverable failures never get here: services retry them internally.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

import trio

from nri_resmgr.errors import EXIT_FATAL as EXIT_FATAL
from nri_resmgr.errors import EXIT_OK as EXIT_OK

log = logging.getLogger(__name__)

T = TypeVar("T")


class Service(Protocol):
    name: str

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled; call ``task_status.started()`` once ready."""

    async def stop(self) -> None:
        """Stop serving (idempotent). Must not take the manager lock while draining."""


class Daemon:
    def __init__(
        self,
        services: Sequence[Service],
        *,
        grace: float = 10.0,
        on_event: Callable[[str], None] | None = None,
    ) -> None:
        self.services = list(services)
        self.grace = grace
        self.events: list[str] = []
        self.exit_code = EXIT_OK
        self.shutdown_reason: str | None = None
        self._on_event = on_event
        self._started: list[Service] = []
        self._shutdown = trio.Event()
        self._root: trio.Nursery | None = None

    def _record(self, event: str) -> None:
        self.events.append(event)
        if self._on_event:
            self._on_event(event)

    async def run(self) -> int:
        async with trio.open_nursery() as root:
            self._root = root
            root.start_soon(self._watch_signals)
            root.start_soon(self._shutdown_when_requested)
            for service in self.services:
                if self._shutdown.is_set():
                    break
                await root.start(self._supervise, service)
                self._started.append(service)
                log.info("started %s", service.name)
            self._record("running")
        log.info("exiting with code %d", self.exit_code)
        self._record(f"exit {self.exit_code}")
        return self.exit_code

    def request_shutdown(self, reason: str, *, fatal: bool) -> None:
        if self._shutdown.is_set():
            log.info("shutdown already in progress; also: %s", reason)
            return
        self.shutdown_reason = reason
        self.exit_code = EXIT_FATAL if fatal else EXIT_OK
        (log.error if fatal else log.info)("shutting down: %s", reason)
        self._record("shutdown requested")
        self._shutdown.set()

    async def _supervise(self, service: Service, *, task_status: Any) -> None:
        started = False

        def mark_started(value: Any = None) -> None:
            nonlocal started
            started = True
            task_status.started(value)

        status = _StartedHook(mark_started)
        try:
            await service.serve(task_status=status)
            if not self._shutdown.is_set():
                self.request_shutdown(f"{service.name} stopped serving", fatal=True)
        except Exception as exc:
            log.debug("%s failed", service.name, exc_info=True)
            self.request_shutdown(f"{service.name} failed: {exc}", fatal=True)
        finally:
            if not started:
                task_status.started()

    async def _watch_signals(self) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                name = signal.Signals(signum).name
                if self._shutdown.is_set() and self._root is not None:
                    log.warning("second %s: cancelling without waiting for services", name)
                    self._root.cancel_scope.cancel(reason=f"second {name}")
                    return
                self.request_shutdown(f"received {name}", fatal=False)

    async def _shutdown_when_requested(self) -> None:
        await self._shutdown.wait()
        with trio.move_on_after(self.grace) as grace:
            for service in reversed(self._started):
                log.info("stopping %s", service.name)
                self._record(f"stopping {service.name}")
                await service.stop()
                self._record(f"stopped {service.name}")
        if grace.cancelled_caught:
            log.warning("services did not stop within %.1fs; cancelling them", self.grace)
            self._record("grace expired")
        self._record("cancel root")
        assert self._root is not None
        self._root.cancel_scope.cancel(reason=self.shutdown_reason)


class _StartedHook:
    """A task_status that tells the supervisor whether the service reached 'started'."""

    def __init__(self, started: Callable[[Any], None]) -> None:
        self.started = started


async def until_signalled(fn: Callable[[], Awaitable[T]]) -> T | None:
    """``await fn()``, unless SIGTERM/SIGINT comes first: then None.

    For the work before the services start (waiting for the first cluster config), so that
    a signal stops the daemon in that phase too, with a clean exit.
    """
    result: list[T] = []
    failure: list[Exception] = []
    async with trio.open_nursery() as nursery:

        async def watch_signals() -> None:
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for signum in signals:
                    log.info("received %s before start-up finished: exiting",
                             signal.Signals(signum).name)  # fmt: skip
                    nursery.cancel_scope.cancel(reason=f"{signal.Signals(signum).name} at start-up")
                    return

        nursery.start_soon(watch_signals)
        try:
            result.append(await fn())
        except Exception as exc:  # raised below as itself, not wrapped in a group
            failure.append(exc)
        nursery.cancel_scope.cancel(reason="start-up work finished")
    if failure:
        raise failure[0]
    return result[0] if result else None
