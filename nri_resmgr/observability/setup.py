"""Wiring instrumentation, the log section and the NodeResourceTopology export into the daemon.

Everything here runs once at start; what follows the configuration afterwards does so through
the manager's reconfigure hooks (log section, HTTP endpoint) or by reading ``manager.spec``
when it acts (``prometheusExport``, ``metrics.enabled``, ``agent.nodeResourceTopology``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from nri_resmgr import log as logconfig
from nri_resmgr.config import notapplied
from nri_resmgr.config.models import InstrumentationConfig, PolicySpec
from nri_resmgr.instrumentation import metrics
from nri_resmgr.instrumentation.exports import TopologyZone
from nri_resmgr.instrumentation.health import READINESS
from nri_resmgr.instrumentation.metrics import CHANGES
from nri_resmgr.observability.server import HttpService
from nri_resmgr.resmgr.manager import ResourceManager
from nri_resmgr.resmgr.policy import Policy

if TYPE_CHECKING:
    from nri_resmgr.kube import KubeClient
    from nri_resmgr.observability.nrt import NrtExporter

METRIC_GROUPS = ("policy",)
"""``metrics.enabled`` groups that switch something: the policy gauges. The request,
DRA and config instruments are always exported."""


NOT_APPLIED = (
    "spec.instrumentation.samplingRatePerMillion",
    "spec.instrumentation.tracingCollector",
    "spec.instrumentation.metricsExporter",
    "spec.instrumentation.reportPeriod",
    "spec.instrumentation.logExporter",
    "spec.instrumentation.logExportPeriod",
    "spec.instrumentation.metrics.polled",
    "spec.agent.podResourceAPI",
    "spec.log.klog.v",
    "spec.control.rdt",
    "spec.control.blockio",
)
"""The keys of the common sections that every policy accepts and none acts on, each said
once when set (``declare_not_applied``; ``log.klog.v`` by ``log.configure``). The
configuration reference (docs/configuration.md) is generated from this and the policies'
own declarations. ``metricsExporter: prometheus`` is the one value of those that is
applied (it is what ``prometheusExport`` does)."""
_CLASS_CONTROLS = ("spec.control.rdt", "spec.control.blockio")


def declare_not_applied(spec: PolicySpec) -> None:
    """One warning per key set to something nri-resmgr does not act on."""
    notapplied.report(spec, _CLASS_CONTROLS)
    i, default = spec.instrumentation, InstrumentationConfig()
    checks = {
        "samplingRatePerMillion": i.sampling_rate_per_million != 0,
        "tracingCollector": i.tracing_collector != "",
        "metricsExporter": i.metrics_exporter not in ("", "prometheus"),
        "reportPeriod": i.report_period != default.report_period,
        "logExporter": i.log_exporter != "",
        "logExportPeriod": i.log_export_period != "",
        "metrics.polled": bool(i.metrics.polled),
    }
    for key, set_ in checks.items():
        if set_:
            logconfig.not_applied(f"spec.instrumentation.{key}")
    for group in i.metrics.enabled:
        if group not in (*METRIC_GROUPS, "buildinfo", "*"):
            logconfig.not_applied(f"spec.instrumentation.metrics.enabled[{group}]")
    if spec.agent.pod_resource_api:
        logconfig.not_applied("spec.agent.podResourceAPI")


def _log_hook(spec: PolicySpec) -> Callable[[bool], None]:
    logconfig.parse_debug(spec.log.debug)  # refuses a bad section before anything changes

    def finish(applied: bool) -> None:
        if applied:
            logconfig.configure(spec.log)
            declare_not_applied(spec)

    return finish


def _metrics_hook(spec: PolicySpec) -> Callable[[bool], None]:
    """Counting starts when a configuration turning prometheusExport on is applied."""

    def finish(applied: bool) -> None:
        if applied and spec.instrumentation.prometheus_export:
            metrics.enable()

    return finish


class ManagerSource:
    """The NodeResourceTopology exporter's view of the resource manager."""

    def __init__(self, manager: ResourceManager) -> None:
        self._manager = manager

    def zones(self) -> tuple[str, list[TopologyZone]]:
        return self._manager.policy.name, self._manager.policy.topology_zones()

    def attributes(self) -> list[tuple[str, str]]:
        return self._manager.policy.topology_attributes()

    def enabled(self) -> bool:
        return self._manager.spec.agent.node_resource_topology


def instrumentation_services(
    manager: ResourceManager,
    *,
    node_name: str,
    kube: KubeClient | None,
    dra: bool,
    generation: Callable[[], int],
    nrt_interval: float | None = None,
) -> list[HttpService | NrtExporter]:
    """The HTTP service, and with cluster access the NRT exporter (writing at most once per
    ``nrt_interval`` seconds); sets up the rest."""
    spec = manager.spec
    logconfig.configure(spec.log)
    declare_not_applied(spec)
    manager.reconfigure_hooks.append(_log_hook)
    READINESS.reset()
    READINESS.require("nri")
    if dra:
        READINESS.require("dra")

    def policy() -> Policy | None:
        enabled = manager.spec.instrumentation.metrics.enabled
        return manager.policy if "policy" in enabled or "*" in enabled else None

    metrics.follow(policy, generation)
    if spec.instrumentation.prometheus_export:
        metrics.enable()
    manager.reconfigure_hooks.append(_metrics_hook)
    http = HttpService(lambda: manager.spec)
    manager.reconfigure_hooks.append(http.prepare)
    services: list[HttpService | NrtExporter] = [http]
    if kube is not None:
        from nri_resmgr.observability.nrt import DEFAULT_MIN_INTERVAL, NrtExporter

        interval = DEFAULT_MIN_INTERVAL if nrt_interval is None else nrt_interval
        services.append(NrtExporter(kube, node_name, ManagerSource(manager), CHANGES.wait,
                                    min_interval=interval))  # fmt: skip
    return services


__all__ = ["NOT_APPLIED", "ManagerSource", "declare_not_applied", "instrumentation_services"]
