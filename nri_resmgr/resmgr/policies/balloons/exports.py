"""balloons gauges and NodeResourceTopology zones, one per balloon.

The gauge is nri-plugins' ``policy.balloons`` meter (``cmd/plugins/balloons/policy/metrics.go``)
as its Prometheus exporter names it, ``nri_policy_balloons_cores``: value = the balloon's
CPUs, with the upstream labels nri-resmgr can fill. Zones follow upstream's
``GetTopologyZones``: type ``balloon``; cpu capacity = every online CPU, allocatable = the
largest balloon it may grow to, available = that minus its members' requests.
"""

from __future__ import annotations

from nri_resmgr.resmgr.exports import PolicyGauge, TopologyZone, ZoneResource, milli
from nri_resmgr.resmgr.policies.balloons.metrics import HELP, METRIC, balloon_samples
from nri_resmgr.resmgr.policies.balloons.state import Balloon, Balloons

GAUGE = METRIC


def _max_cpus(state: Balloons, b: Balloon) -> int:
    room = len(state.free()) + len(b.cpus)
    return min(room, b.type.max_cpus) if b.type.max_cpus > 0 else room


def gauges(state: Balloons) -> list[PolicyGauge]:
    """The served form of ``metrics.balloon_samples``: one definition of the labels."""
    return [
        PolicyGauge(x.name, HELP, x.value, tuple(sorted(x.labels.items())))
        for x in balloon_samples(state)
    ]


def zones(state: Balloons) -> list[TopologyZone]:
    total = 1000 * len(state.system.online)
    out: list[TopologyZone] = []
    for b in state.balloons:
        allocatable = 1000 * _max_cpus(state, b)
        available = max(0, allocatable - b.requested)
        cpu = ZoneResource("cpu", milli(total), milli(allocatable), milli(available))
        attributes = (("cpuset", str(b.cpus)),)
        out.append(TopologyZone(b.name, "balloon", resources=(cpu,), attributes=attributes))
    return out


__all__ = ["GAUGE", "gauges", "zones"]
