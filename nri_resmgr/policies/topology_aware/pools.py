"""The topology-aware pool tree: root → sockets → dies → NUMA nodes → L3 caches, from the
hardware, as nri-plugins' ``pools.go`` buildPoolsByTopology builds it.

A level with a single child is not materialised (its only child would equal it). Pools are
numbered depth-first; a parent's CPUs are the union of its children's (plus any CPUs of
memoryless NUMA nodes, which fold into the parent). L3 cache pools (AMD EPYC-like CCXs)
sit under the deepest of socket, die and NUMA node, when that pool holds more than one L3
cache wholly; they are ordered by cache id and named ``<parent>/L3 cache #<id>``.

No child pool has the CPUs of its parent or of a sibling: a split that does not split is
not built (``_distinct``). Caches are told apart by their CPUs, not by their ids alone:
qemu's default CPU (AMD vendor without ``topoext``) gives every CPU of a NUMA node an L3 of
its own id, each listing the whole node, which would otherwise make four copies of the node
under it. (nri-plugins keys L3 pools by cache id only and would build those copies.) Dies are
omitted when sysfs gives cluster ids and every die is a single cluster (upstream's
"dies are same as clusters"); without cluster ids, dies are kept.
"""

from __future__ import annotations

import attrs

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.topology_aware.memory import attached_memory
from nri_resmgr.sysfs import System

LEVELS = ("system", "package", "die", "numa", "l3cache")


@attrs.frozen
class Pool:
    index: int
    name: str
    level: str
    depth: int
    cpus: CpuSet
    mems: CpuSet
    """NUMA nodes whose memory this pool's containers use."""
    parent: int | None
    children: tuple[int, ...] = ()


@attrs.frozen
class _Shape:
    name: str
    level: str
    cpus: CpuSet
    children: tuple[_Shape, ...] = ()


def build_pools(system: System) -> list[Pool]:
    packages = system.packages()
    sockets = tuple(_socket_shape(system, p) for p in packages)
    root = sockets[0] if len(sockets) == 1 else _Shape("root", "system", system.online, sockets)
    pools: list[Pool] = []
    _number(system, root, None, 0, pools)
    return pools


def _socket_shape(system: System, package: int) -> _Shape:
    cpus = system.package_cpus(package)
    dies = system.dies(package)
    name = f"socket #{package}"
    l3 = _l3_caches(system, package)
    if len(dies) > 1 and not _dies_are_clusters(system, package, dies):
        children = _distinct(cpus, tuple(_die_shape(system, package, d, l3) for d in dies))
    else:
        children = _numa_shapes(system, cpus, l3) or _l3_shapes(name, cpus, l3)
    return _Shape(name, "package", cpus, children)


def _die_shape(system: System, package: int, die: int, l3: list[tuple[int, CpuSet]]) -> _Shape:
    name = f"die #{package}/{die}"
    cpus = system.die_cpus(package, die)
    children = _numa_shapes(system, cpus, l3) or _l3_shapes(name, cpus, l3)
    return _Shape(name, "die", cpus, children)


def _numa_shapes(system: System, cpus: CpuSet, l3: list[tuple[int, CpuSet]]) -> tuple[_Shape, ...]:
    # A CPU-ful node without memory is skipped: its CPUs stay with the parent only.
    nodes = [n for n in system.nodes_of(cpus) if system.nodes[n].memory > 0]
    if len(nodes) < 2:
        return ()
    shapes = []
    for n in nodes:
        name, node_cpus = f"NUMA node #{n}", system.nodes[n].cpus & cpus
        shapes.append(_Shape(name, "numa", node_cpus, _l3_shapes(name, node_cpus, l3)))
    return _distinct(cpus, tuple(shapes))


def _l3_caches(system: System, package: int) -> list[tuple[int, CpuSet]]:
    """(id, CPUs) of the package's L3 caches, by id; each CPU's first L3 cache counts."""
    found: dict[int, CpuSet] = {}
    for cpu in system.package_cpus(package):
        for cache in system.details.caches.get(cpu, ()):
            if cache.level == 3:
                found.setdefault(cache.id, cache.cpus)
                break
    return sorted(found.items())


def _l3_shapes(parent: str, cpus: CpuSet, l3: list[tuple[int, CpuSet]]) -> tuple[_Shape, ...]:
    inside = [(i, c) for i, c in l3 if c.issubset(cpus)]
    shapes = tuple(_Shape(f"{parent}/L3 cache #{i}", "l3cache", c) for i, c in inside)
    return _distinct(cpus, shapes)


def _distinct(parent: CpuSet, children: tuple[_Shape, ...]) -> tuple[_Shape, ...]:
    """Children that split their parent: none equal to it, none equal to an earlier sibling;
    fewer than two left is none at all (a lone child would equal the parent's CPUs)."""
    kept: list[_Shape] = []
    for child in children:
        if child.cpus != parent and all(child.cpus != k.cpus for k in kept):
            kept.append(child)
    return tuple(kept) if len(kept) >= 2 else ()


def _dies_are_clusters(system: System, package: int, dies: list[int]) -> bool:
    clusters = system.details.cluster
    cpus = system.package_cpus(package)
    if not all(c in clusters for c in cpus):
        return False  # unknown clusters: keep the dies (upstream would take them as one)
    return all(len({clusters[c] for c in system.die_cpus(package, d)}) <= 1 for d in dies)


def _number(
    system: System, shape: _Shape, parent: int | None, depth: int, pools: list[Pool]
) -> int:
    index = len(pools)
    pools.append(Pool(index, shape.name, shape.level, depth, shape.cpus, CpuSet(), parent))
    children = tuple(_number(system, child, index, depth + 1, pools) for child in shape.children)
    pools[index] = attrs.evolve(
        pools[index], children=children, mems=_pool_mems(system, shape.cpus, parent is None)
    )
    return index


def _pool_mems(system: System, cpus: CpuSet, is_root: bool) -> CpuSet:
    if is_root:
        # Leftover memory (memoryless of CPUs or unattached) belongs to the root.
        with_memory = CpuSet(n.id for n in system.nodes.values() if n.memory > 0)
        return with_memory or CpuSet(system.nodes)
    # CPU-less memory (HBM, PMEM) goes with the pools of the CPU nodes closest to it.
    return system.closest_memory(cpus) | attached_memory(system, system.nodes_of(cpus))


def ancestors(pools: list[Pool], index: int) -> list[int]:
    out: list[int] = []
    parent = pools[index].parent
    while parent is not None:
        out.append(parent)
        parent = pools[parent].parent
    return out


def subtree(pools: list[Pool], index: int) -> list[int]:
    out = [index]
    for child in pools[index].children:
        out.extend(subtree(pools, child))
    return out
