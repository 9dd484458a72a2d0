"""The daemon's instruments, switched on when metrics are exported.

Request instruments wrap the NRI handler table and the DRA claim calls in one place each, so
no handler carries metrics code. Until ``enable`` runs (at start or at a reconfiguration
that turns ``instrumentation.prometheusExport`` on) nothing is counted and
``prometheus_client`` is not even imported (``prom.py`` holds the registry): a daemon that
exports no metrics pays neither the import at start nor the counting per request. Counters
therefore start at the moment export is switched on, as they do at a restart.

Policy gauges are collected at scrape time from the active policy's ``gauges()`` (on the
trio thread, so they see a state no request is half-way through). ``CHANGES`` is signalled
after every request and reconfiguration, exported or not, for exporters that follow the
policy's state (the NodeResourceTopology exporter).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
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


RawHandler = Callable[[bytes], Awaitable[bytes]]


def observe_nri_handlers(methods: dict[str, RawHandler]) -> dict[str, RawHandler]:
    """The NRI handler table with every method counted and timed under its NRI name."""

    def wrap(name: str, handler: RawHandler) -> RawHandler:
        children: list[prom.Instruments] = []  # looked up once, on the first counted call

        async def call(payload: bytes) -> bytes:
            if _prom is None:
                try:
                    return await handler(payload)
                finally:
                    CHANGES.notify()
            if not children:
                children.append(_prom.Instruments("nri", name))
            i = children[0]
            # _timed spelled out: on the NRI path a generator context manager costs more
            # than the counting itself.
            start = time.perf_counter()
            try:
                reply = await handler(payload)
            except BaseException:
                i.error.inc()
                raise
            finally:
                i.latency.observe(time.perf_counter() - start)
                CHANGES.notify()
            i.ok.inc()
            return reply

        return call

    return {name: wrap(name, h) for name, h in methods.items()}


InlineHandler = Callable[[bytes], bytes | None]


def observe_nri_inline(methods: dict[str, InlineHandler]) -> dict[str, InlineHandler]:
    """The inline NRI handlers (answered in the ttrpc reader), counted and timed as the
    task-path ones are; a None (would wait: the task path takes it) counts nothing."""

    def wrap(name: str, handler: InlineHandler) -> InlineHandler:
        children: list[prom.Instruments] = []  # looked up once, on the first counted call

        def call(payload: bytes) -> bytes | None:
            if _prom is None:
                reply = handler(payload)
                if reply is not None:
                    CHANGES.notify()
                return reply
            if not children:
                children.append(_prom.Instruments("nri", name))
            i = children[0]
            start = time.perf_counter()
            try:
                reply = handler(payload)
            except BaseException:
                i.latency.observe(time.perf_counter() - start)
                i.error.inc()
                CHANGES.notify()
                raise
            if reply is not None:
                i.latency.observe(time.perf_counter() - start)
                i.ok.inc()
                CHANGES.notify()
            return reply

        return call

    return {name: wrap(name, h) for name, h in methods.items()}


_PROM_NAMES = frozenset(
    {"CONFIG_GENERATION", "CONFIG_RELOADS", "DRA_LATENCY", "DRA_REQUESTS", "NRI_LATENCY",
     "NRI_REQUESTS", "POLICY", "REGISTRY"}
)  # fmt: skip


def __getattr__(name: str) -> Any:
    """The registry and instruments by their old names here; asking for one enables them."""
    if name in _PROM_NAMES:
        return getattr(enable(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CHANGES",
    "ChangeSignal",
    "count_reload",
    "enable",
    "enabled",
    "follow",
    "observe_nri_handlers",
    "observe_nri_inline",
    "observed",
]
