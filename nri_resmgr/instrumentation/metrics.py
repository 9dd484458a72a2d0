"""The Prometheus registry and the daemon's instruments.

Request instruments wrap the NRI handler table and the DRA claim calls in one place each, so
no handler carries metrics code. Policy gauges are collected at scrape time from the active
policy's ``gauges()`` (on the trio thread, so they see a state no request is half-way
through). ``CHANGES`` is signalled after every request and reconfiguration, for exporters
that follow the policy's state (the NodeResourceTopology exporter).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING

import trio
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from nri_resmgr.resmgr.policy import Policy

# No *_created series: a daemon restart resets every counter anyway, and they double the
# size of each scrape.
disable_created_metrics()  # type: ignore[no-untyped-call]
REGISTRY = CollectorRegistry(auto_describe=True)

# Sub-millisecond to the NRI request timeout (2 s by default): where our latencies fall.
_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0)

NRI_REQUESTS = Counter(
    "nri_resmgr_nri_requests", "NRI requests handled, by method and outcome.",
    ["method", "outcome"], registry=REGISTRY,
)  # fmt: skip
NRI_LATENCY = Histogram(
    "nri_resmgr_nri_request_duration_seconds", "Time to answer an NRI request, by method.",
    ["method"], buckets=_BUCKETS, registry=REGISTRY,
)  # fmt: skip
DRA_REQUESTS = Counter(
    "nri_resmgr_dra_requests", "DRA kubelet-plugin calls handled, by method and outcome.",
    ["method", "outcome"], registry=REGISTRY,
)  # fmt: skip
DRA_LATENCY = Histogram(
    "nri_resmgr_dra_request_duration_seconds", "Time to answer a DRA call, by method.",
    ["method"], buckets=_BUCKETS, registry=REGISTRY,
)  # fmt: skip
CONFIG_RELOADS = Counter(
    "nri_resmgr_config_reloads", "Reconfigurations, by outcome (applied or refused).",
    ["outcome"], registry=REGISTRY,
)  # fmt: skip
CONFIG_GENERATION = Gauge(
    "nri_resmgr_config_generation", "metadata.generation of the configuration CR in force.",
    registry=REGISTRY,
)  # fmt: skip


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


class _Instruments:
    """One method's children, looked up once: a labels() call costs a lock and a dict walk,
    which would be most of the price of counting a request."""

    def __init__(self, counter: Counter, histogram: Histogram, method: str) -> None:
        self.ok = counter.labels(method, "ok")
        self.error = counter.labels(method, "error")
        self.latency = histogram.labels(method)


@contextmanager
def _timed(instruments: _Instruments) -> Iterator[None]:
    start = time.perf_counter()
    ok = False
    try:
        yield
        ok = True
    finally:
        instruments.latency.observe(time.perf_counter() - start)
        (instruments.ok if ok else instruments.error).inc()
        CHANGES.notify()


def observed(counter: Counter, histogram: Histogram, method: str) -> AbstractContextManager[None]:
    """Counts and times one request; the outcome is 'error' when it raises."""
    return _timed(_Instruments(counter, histogram, method))


RawHandler = Callable[[bytes], Awaitable[bytes]]


def observe_nri_handlers(methods: dict[str, RawHandler]) -> dict[str, RawHandler]:
    """The NRI handler table with every method counted and timed under its NRI name."""

    def wrap(name: str, handler: RawHandler) -> RawHandler:
        i = _Instruments(NRI_REQUESTS, NRI_LATENCY, name)

        async def call(payload: bytes) -> bytes:
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


class PolicyCollector(Collector):
    """Collects the active policy's gauges at scrape time (upstream: the policy meters).

    One instance, registered at import: ``follow`` points it at the daemon's policy (or at
    nothing when ``metrics.enabled`` leaves the policy group out).
    """

    def __init__(self) -> None:
        self._policy: Callable[[], Policy | None] = lambda: None

    def follow(self, policy: Callable[[], Policy | None]) -> None:
        self._policy = policy

    def collect(self) -> Iterator[Metric]:
        policy = self._policy()
        if policy is None:
            return
        families: dict[str, GaugeMetricFamily] = {}
        for g in policy.gauges():
            family = families.get(g.name)
            if family is None:
                labels = [k for k, _ in g.labels]
                family = families[g.name] = GaugeMetricFamily(g.name, g.help, labels=labels)
            family.add_metric([v for _, v in g.labels], g.value)
        yield from families.values()


POLICY = PolicyCollector()
REGISTRY.register(POLICY)


__all__ = [
    "CHANGES",
    "CONFIG_GENERATION",
    "CONFIG_RELOADS",
    "DRA_LATENCY",
    "DRA_REQUESTS",
    "NRI_LATENCY",
    "NRI_REQUESTS",
    "POLICY",
    "REGISTRY",
    "ChangeSignal",
    "PolicyCollector",
    "observe_nri_handlers",
    "observed",
]
