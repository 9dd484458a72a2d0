"""topology-aware gauges and NodeResourceTopology zones, one per pool.

Names follow nri-plugins' ``cmd/plugins/topology-aware/policy/metrics.go`` as its OpenTelemetry
Prometheus exporter spells them (namespace ``nri``, meter ``policy.topologyaware``, unit
suffix), and the two container counts also under names Prometheus' linter accepts
(``DEPRECATED``). CPU figures follow its ``GetTopologyZones``: capacity = allocatable = the pool's
sharable and reserved CPUs, available = free shared mCPU. Memory: capacity = allocatable =
MemTotal of the pool's memory nodes; assigned = the memory limits of the containers placed in
the pool's subtree (the memory zones of ``memzones.py`` are not read here yet, so a container
whose zone widened still counts in its pool).
"""

from __future__ import annotations

from nri_resmgr.instrumentation.exports import PolicyGauge, TopologyZone, ZoneResource, milli
from nri_resmgr.policies.topology_aware.engine import Engine
from nri_resmgr.policies.topology_aware.pools import Pool

PREFIX = "nri_policy_topologyaware_zone_"
DEPRECATED = (
    "upstream's name, kept for its dashboards; Prometheus reserves the _count suffix for "
    "histograms and summaries (promtool check metrics refuses it): use " + PREFIX + "{}."
)
"""nri-plugins names two gauges ``..._container_count`` and ``..._shared_container_count``;
both are exported under those names and, lint-clean, as ``..._containers`` and
``..._shared_containers``."""
KINDS = {"system": "virtual node", "package": "socket", "die": "die", "numa": "numa node"}
KINDS["l3cache"] = "L3 cache"
"""Our pool levels as upstream's zone types (``node.go`` NodeKind)."""


def _mem_capacity(engine: Engine, pool: Pool) -> int:
    return sum(engine.system.nodes[n].memory for n in pool.mems if n in engine.system.nodes)


def _mem_assigned(engine: Engine, pool: Pool) -> int:
    names = {engine.pools[i].name for i in engine.supply.subtrees[pool.index]}
    total = 0
    for a in engine.allocations():
        c = a.container
        if a.pool in names and c is not None and c.resources is not None:
            total += c.resources.memory_limit or 0
    return total


def _containers(engine: Engine, pool: Pool) -> tuple[int, int]:
    """(all, shared) containers granted in this very pool."""
    mine = engine.in_pool(pool.name)
    return len(mine), sum(1 for a in mine if a.kind.uses_shared)


def gauges(engine: Engine) -> list[PolicyGauge]:
    out: list[PolicyGauge] = []
    for pool in engine.pools:
        zone = pool.name
        shared = engine.supply.shared_cpus(pool.index)
        load = engine.supply.pool_load(pool.index).shared_mcpu
        capacity = _mem_capacity(engine, pool)
        assigned = _mem_assigned(engine, pool)
        count, shared_count = _containers(engine, pool)
        mems = str(pool.mems)
        zone_cpus = (("zone", zone), ("cpus", str(pool.cpus)), ("mems", mems))
        for name, help_, value, labels in (
            ("cpu_capacity_cores", "A topology zone of CPUs.", len(pool.cpus), zone_cpus),
            ("cpu_shared_capacity_cores", "Capacity of shared CPU pool of a topology zone.",
             len(shared), (("zone", zone),)),
            ("cpu_shared_assigned_cores", "Assigned amount of shared CPU pool of a topology zone.",
             load / 1000, (("zone", zone),)),
            ("cpu_shared_available_cores",
             "Available amount of shared CPU pool of a topology zone.",
             max(0, len(shared) * 1000 - load) / 1000, (("zone", zone),)),
            ("mem_capacity_bytes", "Memory capacity of a topology zone.", capacity,
             (("zone", zone), ("mems", mems))),
            ("mem_assigned_bytes", "Amount of assigned memory of a topology zone.", assigned,
             (("zone", zone), ("mems", mems))),
            ("mem_available_bytes", "Amount of available memory of a topology zone.",
             max(0, capacity - assigned), (("zone", zone), ("mems", mems))),
            ("containers", "Number of containers assigned to a topology zone.", count,
             (("zone", zone),)),
            ("shared_containers",
             "Number of containers in the shared CPU pool of a topology zone.", shared_count,
             (("zone", zone),)),
            ("container_count", "Deprecated: " + DEPRECATED.format("containers"), count,
             (("zone", zone),)),
            ("shared_container_count", "Deprecated: " + DEPRECATED.format("shared_containers"),
             shared_count, (("zone", zone),)),
        ):  # fmt: skip
            out.append(PolicyGauge(PREFIX + name, help_, value, labels))
    return out


def zones(engine: Engine) -> list[TopologyZone]:
    out: list[TopologyZone] = []
    supply = engine.supply
    for pool in engine.pools:
        i = pool.index
        cpus = supply.sharable[i] | (pool.cpus & engine.reserved)
        free = max(0, len(supply.shared_cpus(i)) * 1000 - supply.pool_load(i).shared_mcpu)
        capacity = _mem_capacity(engine, pool)
        available = max(0, capacity - _mem_assigned(engine, pool))
        attributes = [("memory set", str(pool.mems)), ("shared cpuset", str(supply.shared_cpus(i)))]
        if pool.cpus & engine.reserved:
            attributes.append(("reserved cpuset", str(pool.cpus & engine.reserved)))
        if supply.isolated_of[i]:
            attributes.append(("isolated cpuset", str(supply.isolated_of[i])))
        parent = engine.pools[pool.parent].name if pool.parent is not None else ""
        out.append(
            TopologyZone(
                name=pool.name,
                type=KINDS.get(pool.level, pool.level),
                parent=parent,
                resources=(
                    ZoneResource("memory", str(capacity), str(capacity), str(available)),
                    ZoneResource(
                        "cpu", milli(1000 * len(cpus)), milli(1000 * len(cpus)), milli(free)
                    ),
                ),
                attributes=tuple(attributes),
            )
        )
    return out


__all__ = ["PREFIX", "gauges", "zones"]
