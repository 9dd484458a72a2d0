"""The topology-aware pool tree: root → sockets → dies → NUMA nodes, from the hardware.

A level with a single child is not materialised (its only child would equal it). Pools are
numbered depth-first; a parent's CPUs are the union of its children's (plus any CPUs of
memoryless NUMA nodes, which fold into the parent).
"""

from __future__ import annotations

import attrs

from nri_resmgr.resmgr.cpuset import CpuSet
from nri_resmgr.resmgr.policies.topology_aware.memory import attached_memory
from nri_resmgr.sysfs import System

LEVELS = ("system", "package", "die", "numa")


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
    if len(dies) > 1:
        children = tuple(
            _Shape(
                f"die #{package}/{d}",
                "die",
                system.die_cpus(package, d),
                _numa_shapes(system, system.die_cpus(package, d)),
            )
            for d in dies
        )
    else:
        children = _numa_shapes(system, cpus)
    return _Shape(f"socket #{package}", "package", cpus, children)


def _numa_shapes(system: System, cpus: CpuSet) -> tuple[_Shape, ...]:
    # A CPU-ful node without memory is skipped: its CPUs stay with the parent only.
    nodes = [n for n in system.nodes_of(cpus) if system.nodes[n].memory > 0]
    if len(nodes) < 2:
        return ()
    return tuple(_Shape(f"NUMA node #{n}", "numa", system.nodes[n].cpus & cpus) for n in nodes)


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
