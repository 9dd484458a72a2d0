"""The Prometheus registry and instruments; imported only once metrics are exported.

``prometheus_client`` costs tens of milliseconds to import, so a daemon that exports no
metrics (``instrumentation.prometheusExport`` off, the default) never loads it: see
``metrics.enable``, the one importer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from nri_resmgr.instrumentation.exports import GaugeSource

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric


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
UPDATE_RETRIES = Counter(
    "nri_resmgr_nri_update_retries",
    "Containers' unsolicited updates (UpdateContainers) the runtime failed, and what became "
    "of their retries, by outcome (failed, ok, dropped, given_up).",
    ["outcome"], registry=REGISTRY,
)  # fmt: skip
CONFIG_GENERATION = Gauge(
    "nri_resmgr_config_generation", "metadata.generation of the configuration CR in force.",
    registry=REGISTRY,
)  # fmt: skip
REQUESTS = {"nri": (NRI_REQUESTS, NRI_LATENCY), "dra": (DRA_REQUESTS, DRA_LATENCY)}


class Instruments:
    """One method's children, looked up once: a labels() call costs a lock and a dict walk,
    which would be most of the price of counting a request."""

    def __init__(self, kind: str, method: str) -> None:
        counter, histogram = REQUESTS[kind]
        self.ok = counter.labels(method, "ok")
        self.error = counter.labels(method, "error")
        self.latency = histogram.labels(method)


class PolicyCollector(Collector):
    """Collects the active policy's gauges at scrape time (upstream: the policy meters).

    One instance, registered at import: ``follow`` points it at the daemon's policy (or at
    nothing when ``metrics.enabled`` leaves the policy group out).
    """

    def __init__(self) -> None:
        self._policy: Callable[[], GaugeSource | None] = lambda: None

    def follow(self, policy: Callable[[], GaugeSource | None]) -> None:
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
    "CONFIG_GENERATION",
    "CONFIG_RELOADS",
    "DRA_LATENCY",
    "DRA_REQUESTS",
    "NRI_LATENCY",
    "NRI_REQUESTS",
    "POLICY",
    "REGISTRY",
    "UPDATE_RETRIES",
    "Instruments",
    "PolicyCollector",
]
