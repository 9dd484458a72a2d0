"""The daemon's instruments, switched on when metrics are exported.

Request instruments sit in one place each, so no handler carries metrics code: the NRI
ttrpc server tells a ``RequestObserver`` of every request, the DRA claim calls are wrapped.
Until ``enable`` runs (at start or at a reconfiguration that turns
``instrumentation.prometheusExport`` on) nothing is counted and ``prometheus_client`` is not
even imported (``prom.py`` holds the registry): a daemon that exports no metrics pays neither
the import at start nor the counting per request. Counters therefore start at the moment
export is switched on, as they do at a restart.

Policy gauges are collected at scrape time from the active policy's ``gauges()`` (on the
trio thread, so they see a state no request is half-way through). ``CHANGES`` is signalled
after every request and reconfiguration, exported or not, for exporters that follow the
policy's state (the NodeResourceTopology exporter).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from types import ModuleType
from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:
    from nri_resmgr.instrumentation import prom

from nri_resmgr.instrumentation.exports import GaugeSource


class ChangeSignal:
    """A level-triggered 'something changed' for one follower at a time."""

    def __init__(self) -> None:
        self._event = trio.Event()

    def notify(self) -> None:
        self._event.set()

    async def wait(self) -> None:
        await self._event.wait()
        self._event = trio.Event()


CHANGES = ChangeSignal()

_prom: ModuleType | None = None
"""``nri_resmgr.instrumentation.prom`` once enabled; None: nothing is counted."""
_follow: dict[str, Any] = {}
"""What ``follow`` was given before ``enable``: applied to the gauges when they exist."""


def enable() -> ModuleType:
    """Import the registry and instruments (once) and start counting; returns ``prom``."""
    global _prom
    if _prom is None:
        from nri_resmgr.instrumentation import prom as module

        if "policy" in _follow:
            module.POLICY.follow(_follow["policy"])
        if "generation" in _follow:
            module.CONFIG_GENERATION.set_function(_follow["generation"])
        _prom = module
    return _prom


def enabled() -> bool:
    return _prom is not None


def follow(policy: Callable[[], GaugeSource | None], generation: Callable[[], int]) -> None:
    """Point the policy gauges and the config-generation gauge at the daemon's state."""
    _follow.update(policy=policy, generation=generation)
    if _prom is not None:
        _prom.POLICY.follow(policy)
        _prom.CONFIG_GENERATION.set_function(generation)


def count_reload(outcome: str) -> None:
    """One reconfiguration, ``applied`` or ``refused``."""
    if _prom is not None:
        _prom.CONFIG_RELOADS.labels(outcome).inc()


def count_update_retry(outcome: str) -> None:
    """One container's unsolicited update: ``failed``, or its retry ``ok``, ``dropped``
    (nothing left to send) or ``given_up`` (``nri_resmgr.resmgr.retry``)."""
    if _prom is not None:
        _prom.UPDATE_RETRIES.labels(outcome).inc()


@contextmanager
def _timed(kind: str, method: str) -> Iterator[None]:
    if _prom is None:
        try:
            yield
        finally:
            CHANGES.notify()
        return
    instruments: prom.Instruments = _prom.Instruments(kind, method)
    start = time.perf_counter()
    ok = False
    try:
        yield
        ok = True
    finally:
        instruments.latency.observe(time.perf_counter() - start)
        (instruments.ok if ok else instruments.error).inc()
        CHANGES.notify()


def observed(kind: str, method: str) -> AbstractContextManager[None]:
    """Counts and times one request (``kind`` ``nri`` or ``dra``); the outcome is 'error'
    when it raises."""
    return _timed(kind, method)


class RequestObserver:
    """Counts and times requests of one kind (``nri``) by method, once metrics are exported,
    and signals ``CHANGES`` after each: what the NRI ttrpc server is told of every request
    it answers (``nri_resmgr.nri.ttrpc.Observer``), in place or in a handler task."""

    def __init__(self, kind: str) -> None:
        self._kind = kind
        self._instruments: dict[str, prom.Instruments] = {}
        """Each method's children, looked up on its first counted request."""

    def start(self) -> float | None:
        """The start time, or None while nothing is counted."""
        return None if _prom is None else time.perf_counter()

    def done(self, method: str, started: float | None, ok: bool) -> None:
        if started is not None and _prom is not None:
            # _timed spelled out: on the NRI path a generator context manager costs more
            # than the counting itself.
            i = self._instruments.get(method)
            if i is None:
                i = self._instruments[method] = _prom.Instruments(self._kind, method)
            i.latency.observe(time.perf_counter() - started)
            (i.ok if ok else i.error).inc()
        CHANGES.notify()


_PROM_NAMES = frozenset(
    {"CONFIG_GENERATION", "CONFIG_RELOADS", "DRA_LATENCY", "DRA_REQUESTS", "NRI_LATENCY",
     "NRI_REQUESTS", "POLICY", "REGISTRY", "UPDATE_RETRIES"}
)  # fmt: skip


def __getattr__(name: str) -> Any:
    """The registry and instruments by their old names here; asking for one enables them."""
    if name in _PROM_NAMES:
        return getattr(enable(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CHANGES",
    "ChangeSignal",
    "RequestObserver",
    "count_reload",
    "count_update_retry",
    "enable",
    "enabled",
    "follow",
    "observed",
]
