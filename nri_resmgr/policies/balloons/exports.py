"""balloons gauges and NodeResourceTopology zones, one per balloon.

The gauge is nri-plugins' ``policy.balloons`` meter (``cmd/plugins/balloons/policy/metrics.go``)
as its Prometheus exporter names it, ``nri_policy_balloons_cores``: value = the balloon's
CPUs, with the upstream labels nri-resmgr can fill. Zones follow upstream's
``GetTopologyZones``: type ``balloon``; cpu capacity = every online CPU, allocatable = the
largest balloon it may grow to, available = that minus its members' requests; attributes
``cpuset``, ``shared cpuset`` (idle CPUs its members may also use) and ``excess cpus``.

With ``showContainersInNrt`` (the balloon type's value over the policy's; default off) every
member is a subzone too, as upstream exposes it: type ``allocation for container``, named
``namespace/pod/container``, parent = its balloon; cpu capacity = its CPU limit or the CPUs
of its cpuset, whichever is tighter, allocatable = its request, available = 0 (nothing to
schedule there); attributes ``cpuset`` and ``memory set`` as the runtime holds them.
"""

from __future__ import annotations

from nri_resmgr.instrumentation.exports import PolicyGauge, TopologyZone, ZoneResource, milli
from nri_resmgr.policies.allocations import Allocation
from nri_resmgr.policies.balloons.balloon import Balloon
from nri_resmgr.policies.balloons.metrics import HELP, METRIC, balloon_samples
from nri_resmgr.policies.balloons.state import Balloons
from nri_resmgr.policies.requests import container_request

GAUGE = METRIC
CONTAINER_ZONE = "allocation for container"


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
    idle = state.free()
    out: list[TopologyZone] = []
    for b in state.balloons:
        allocatable = 1000 * _max_cpus(state, b)
        available = max(0, allocatable - b.requested)
        cpu = ZoneResource("cpu", milli(total), milli(allocatable), milli(available))
        attributes = (
            ("cpuset", str(b.cpus)),
            ("shared cpuset", str(state.idle_shared(b, idle))),
            ("excess cpus", f"{1000 * len(b.cpus) - b.requested}m"),
        )
        out.append(TopologyZone(b.name, "balloon", resources=(cpu,), attributes=attributes))
        if _shows_containers(state, b):
            members = (state.members.get(cid) for cid in b.members)
            out += sorted(
                (_container_zone(a, b.name, total) for a in members if a is not None),
                key=lambda z: z.name,
            )
    return out


def _shows_containers(state: Balloons, b: Balloon) -> bool:
    own = b.type.show_containers_in_nrt
    return bool(state.spec.show_containers_in_nrt if own is None else own)


def _container_zone(a: Allocation, parent: str, total: int) -> TopologyZone:
    allowed = 1000 * len(a.cpus) if a.cpus else total
    limit = _limit(a)
    capacity = allowed if not limit or limit > allowed else limit
    cpu = ZoneResource("cpu", milli(capacity), milli(a.request), "0")
    attributes = (
        ("cpuset", "" if a.cpus is None else str(a.cpus)),
        ("memory set", "" if a.mems is None else str(a.mems)),
    )
    return TopologyZone(a.name, CONTAINER_ZONE, parent, (cpu,), attributes)


def _limit(a: Allocation) -> int:
    """The container's CPU limit in mCPU; 0 when it has none."""
    if a.pod is None or a.container is None:
        return 0
    return container_request(a.pod, a.container).cpu_limit or 0


__all__ = ["CONTAINER_ZONE", "GAUGE", "gauges", "zones"]
