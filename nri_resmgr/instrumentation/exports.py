"""What a policy exports about itself: gauges for /metrics and zones for NodeResourceTopology.

Both are read on the trio thread between manager calls, so they see the policy's state as the
last request left it; a policy builds them from its own bookkeeping without side effects.
"""

from __future__ import annotations

from typing import Protocol

import attrs


@attrs.frozen
class PolicyGauge:
    """One sample of a policy gauge, e.g. ``nri_policy_topologyaware_zone_container_count``."""

    name: str
    help: str
    value: float
    labels: tuple[tuple[str, str], ...] = ()


@attrs.frozen
class ZoneResource:
    """A resource of a zone; quantities as Kubernetes quantity strings (``2``, ``1500m``)."""

    name: str
    capacity: str
    allocatable: str
    available: str


@attrs.frozen
class TopologyZone:
    """A NodeResourceTopology zone: a NUMA node, a pool or a balloon."""

    name: str
    type: str
    parent: str = ""
    resources: tuple[ZoneResource, ...] = ()
    attributes: tuple[tuple[str, str], ...] = ()
    costs: tuple[tuple[str, int], ...] = ()
    """(zone name, distance): the API's CostList, for NUMA zones."""


class GaugeSource(Protocol):
    """Where the policy gauges are read at scrape time: the active ``Policy``."""

    def gauges(self) -> list[PolicyGauge]: ...


def milli(mcpu: int) -> str:
    """mCPU as a quantity, in whole CPUs when exact (as resource.NewMilliQuantity prints)."""
    return str(mcpu // 1000) if mcpu % 1000 == 0 else f"{mcpu}m"


__all__ = ["GaugeSource", "PolicyGauge", "TopologyZone", "ZoneResource", "milli"]
