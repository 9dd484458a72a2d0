"""NodeResourceTopology zones a NUMA-aware scheduler reads: one per NUMA node.

scheduler-plugins' NodeResourceTopologyMatch (``pkg/noderesourcetopology``) takes only zones
of type ``Node`` (the NRT API's ``helper.ZoneTypeNUMANode``) named ``node-<id>``
(``numanode.NameToID``), compares a Guaranteed container's requests with each zone's
``available``, and filters only when the object's attribute ``topologyManagerPolicy`` is
``single-numa-node`` (scope from ``topologyManagerScope``, default ``container``). The pool
zones (``exports.zones``) stay as nri-plugins writes them; these come after them.

Per NUMA node with CPUs and memory, through the pool whose CPUs are exactly the node's (the
NUMA pool, or the socket or root pool when the node is all of it):

- ``cpu``: capacity = the node's CPUs; allocatable = those minus reserved CPUs and CPUs
  outside the allowed set; available = the most whole CPUs a new Guaranteed container with
  no annotations could get in that pool now (``Supply.most_cpus`` over ``fit``, the rule
  placement itself keeps), so a pod the filter admits on ``available`` fits the pool.
- ``memory``: capacity = allocatable = the node's MemTotal; available = what a new request
  in that node's memory zone could hold (``MemoryAllocator.room``).
- ``costs``: the node's sysfs distances, by ``node-<id>`` (the plugin's LeastNUMANodes
  score reads them).

The policy attributes: ``single-numa-node`` with ``container`` scope. topology-aware places
each container by itself and puts a container that fits one NUMA node in one; unlike kubelet
under that policy, it does not refuse one that fits none (it goes to a socket or the root):
the scheduler's filter is stricter than the node, never looser.
"""

from __future__ import annotations

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.instrumentation.exports import TopologyZone, ZoneResource, milli
from nri_resmgr.policies.topology_aware.engine import Engine
from nri_resmgr.policies.topology_aware.pools import Pool
from nri_resmgr.policies.topology_aware.preferences import plain_guaranteed
from nri_resmgr.sysfs import NumaNode

__all__ = ["NUMA_ZONE_TYPE", "POLICY_ATTRIBUTES", "numa_pools", "numa_zone_name", "numa_zones"]

NUMA_ZONE_TYPE = "Node"
"""noderesourcetopology-api ``helper.ZoneTypeNUMANode``."""
POLICY_ATTRIBUTES = (
    ("topologyManagerPolicy", "single-numa-node"),
    ("topologyManagerScope", "container"),
)
"""The object's attributes NodeResourceTopologyMatch reads (``nodeconfig.AttributePolicy``,
``AttributeScope``): kubelet's topology manager names for what topology-aware does."""


def numa_zone_name(node: int) -> str:
    return f"node-{node}"


def numa_zones(engine: Engine) -> list[TopologyZone]:
    return [_zone(engine, node, pool) for node, pool in numa_pools(engine)]


def numa_pools(engine: Engine) -> list[tuple[NumaNode, Pool]]:
    """The NUMA nodes that get a zone, by id, with their pools."""
    out = []
    for node in sorted(engine.system.nodes.values(), key=lambda n: n.id):
        pool = _pool_of(engine, node)
        if pool is not None:
            out.append((node, pool))
    return out


def _pool_of(engine: Engine, node: NumaNode) -> Pool | None:
    """The deepest pool whose CPUs are the node's; None for a node without CPUs or memory
    (a CPU-ful node without memory has no pool of its own: its CPUs fold into the parent)."""
    if not node.cpus or node.memory <= 0:
        return None
    found = None
    for pool in engine.pools:
        if pool.cpus == node.cpus and (found is None or pool.depth > found.depth):
            found = pool
    return found


def _zone(engine: Engine, node: NumaNode, pool: Pool) -> TopologyZone:
    supply = engine.supply
    usable = (pool.cpus & engine.allowed) - engine.reserved
    spec = engine.spec
    free = supply.most_cpus(pool.index, lambda n: plain_guaranteed(1000 * n, spec), len(usable))
    memory = str(node.memory)
    room = str(engine.memory.room(CpuSet([node.id])))
    costs = tuple((numa_zone_name(n), d) for n, d in sorted(node.distances.items()))
    return TopologyZone(
        name=numa_zone_name(node.id),
        type=NUMA_ZONE_TYPE,
        resources=(
            ZoneResource("cpu", str(len(pool.cpus)), milli(1000 * len(usable)), milli(1000 * free)),
            ZoneResource("memory", memory, memory, room),
        ),
        attributes=(("cpuset", str(pool.cpus)), ("pool", pool.name)),
        costs=costs,
    )
