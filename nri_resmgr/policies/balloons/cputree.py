"""Choosing which CPUs a balloon grows into or gives back, the way nri-plugins' balloons
CPU tree does: a tree system → package → die → NUMA node → core → thread, where the
deepest subtree that can satisfy the whole change wins, ties broken first by how many of
the balloon's CPUs each level holds (stay close to what it has), then by the free CPUs at
each level: fewest first when packing, most first when balancing the topology
(``allocatorTopologyBalancing``). ``preferSpreadOnPhysicalCores`` splits every NUMA node
by thread index, so that a balloon takes one thread of each core before a second one.
Preferred devices (``preferCloseToDevices``) narrow the free CPUs first, when they can.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import attrs

from nri_resmgr.cpus.tight import pick_cpus, release_order
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.sysfs import System


@attrs.frozen
class Load:
    """CPUs loaded at ``level`` ("core" or "l2cache") by balloons with this load, to avoid;
    ``dynamic``: the balloon's own new CPUs load it too (overloadsLevelInBalloon)."""

    level: str
    cpus: CpuSet
    dynamic: bool = False


@attrs.frozen
class Options:
    balancing: bool = False
    spread: bool = False
    close_to: tuple[tuple[CpuSet, ...], ...] = ()
    """Per preferred device, the CPU sets close to it, most important device first."""
    loads: tuple[Load, ...] = ()
    l2: Mapping[int, CpuSet] = attrs.field(factory=dict)
    """CPU -> the CPUs sharing its L2 cache (empty: the core)."""
    paths: Mapping[int, tuple[str, ...]] | None = None
    """Precomputed ``tree_paths`` (they only depend on the machine and ``spread``)."""


def tree_paths(system: System, o: Options) -> dict[int, tuple[str, ...]]:
    return {cpu: _path(system, cpu, o) for cpu in system.cpus}


def domain(system: System, o: Options, level: str, cpus: CpuSet) -> CpuSet:
    """Every CPU sharing a core (or an L2 cache) with one of ``cpus``."""
    if level == "core":
        return CpuSet.union_all(system.core_of(c) for c in cpus)
    return CpuSet.union_all(o.l2.get(c, system.core_of(c)) for c in cpus)


def _path(system: System, cpu: int, o: Options) -> tuple[str, ...]:
    """Names of the tree nodes from the root to ``cpu`` (the names order equal subtrees)."""
    c = system.cpus[cpu]
    numa = f"p{c.package}d{c.die}n{c.node}"
    threads = sorted(c.threads)
    core = f"{numa}cpu{threads[0]}"
    levels = [f"p{c.package}", f"p{c.package}d{c.die}", numa]
    if o.spread:
        levels.append(f"{numa}class{threads.index(cpu)}")
    levels.append(f"{numa}${min(o.l2.get(cpu, c.threads))}")
    return ("system", *levels, core, f"{core}t{cpu}")


@attrs.frozen
class _Node:
    depth: int
    cpus: list[int]
    current: tuple[int, ...]
    free: tuple[int, ...]
    name: str


def _nodes(system: System, current: CpuSet, free: CpuSet, o: Options) -> list[_Node]:
    # Counted with integers: this runs on every resize, over every CPU of the machine.
    members: dict[tuple[str, ...], list[int]] = defaultdict(list)
    n_current: dict[tuple[str, ...], int] = defaultdict(int)
    n_free: dict[tuple[str, ...], int] = defaultdict(int)
    cur, fr = set(current), set(free)
    paths = o.paths
    for cpu in cur | fr:
        path = paths[cpu] if paths is not None else _path(system, cpu, o)
        is_cur, is_free = cpu in cur, cpu in fr
        for depth in range(len(path)):
            prefix = path[: depth + 1]
            members[prefix].append(cpu)
            n_current[prefix] += is_cur
            n_free[prefix] += is_free
    nodes = []
    for prefix, cpus in members.items():
        heads = [prefix[: d + 1] for d in range(len(prefix))]
        nodes.append(
            _Node(
                depth=len(prefix) - 1,
                cpus=cpus,
                current=tuple(n_current[h] for h in heads),
                free=tuple(n_free[h] for h in heads),
                name=prefix[-1],
            )
        )
    return nodes


def _best_local(
    system: System, current: CpuSet, free: CpuSet, delta: int, o: Options
) -> CpuSet | None:
    """The CPUs of the best subtree to add ``delta`` CPUs from (delta > 0) or to remove
    ``-delta`` from (delta < 0); None if no subtree can."""
    nodes = _nodes(system, current, free, o)
    if delta > 0:
        fitting = [n for n in nodes if n.free[-1] >= delta]
        if not fitting:
            return None
        sign = -1 if o.balancing else 1

        def rank(n: _Node) -> tuple[int, tuple[int, ...], tuple[int, ...], str]:
            return (-n.depth, tuple(-x for x in n.current), tuple(sign * x for x in n.free), n.name)

        best = min(fitting, key=rank)
        return CpuSet(best.cpus) & free
    fitting = [n for n in nodes if n.current[-1] >= -delta]
    if not fitting:
        return None
    best = min(
        fitting,
        key=lambda n: (-n.depth, n.current, n.free, _Desc(n.name)),
    )
    return CpuSet(best.cpus) & current


class _Desc(str):
    """A name that sorts in reverse (release prefers the last equal subtree)."""

    def __lt__(self, other: str) -> bool:
        return str.__gt__(self, other)


def _hinted(free: CpuSet, delta: int, close_to: Sequence[Sequence[CpuSet]]) -> CpuSet:
    """The free CPUs narrowed by every device hint that still leaves ``delta`` of them."""
    remaining = free
    for hints in close_to:
        for cpus in hints:
            narrowed = remaining & cpus
            if len(narrowed) >= delta:
                remaining = narrowed
    return remaining


def grow(system: System, current: CpuSet, free: CpuSet, count: int, o: Options) -> CpuSet | None:
    """``count`` CPUs out of ``free`` for a balloon that has ``current``; None if short."""
    if count <= 0:
        return CpuSet()
    if count > len(free):
        return None
    if count == len(free):
        return free
    if any(ld.dynamic for ld in o.loads) and count > 1:
        # Each CPU taken loads its core / L2 for the next one: take them one at a time.
        taken = CpuSet()
        for _ in range(count):
            one = _grow_once(system, current | taken, free - taken, 1, o)
            if one is None:
                return None
            taken = taken | one
            o = attrs.evolve(o, loads=tuple(_loaded_more(system, o, ld, one) for ld in o.loads))
        return taken
    return _grow_once(system, current, free, count, o)


def _loaded_more(system: System, o: Options, ld: Load, cpus: CpuSet) -> Load:
    return attrs.evolve(ld, cpus=ld.cpus | domain(system, o, ld.level, cpus)) if ld.dynamic else ld


def _grow_once(
    system: System, current: CpuSet, free: CpuSet, count: int, o: Options
) -> CpuSet | None:
    hints = [*o.close_to, *((free - ld.cpus,) for ld in o.loads)]
    free = _hinted(free, count, hints)
    candidates = _best_local(system, current, free, count, o)
    if candidates is None:
        return None
    if o.spread and len(candidates) > count:
        # Equally good subtrees are not equally good threads: add one CPU at a time.
        taken = CpuSet()
        for _ in range(count):
            one = _best_local(system, current | taken, free - taken, 1, o)
            if one is None:
                return None
            taken = taken | pick_cpus(system, one, 1)
        return taken
    return pick_cpus(system, candidates, count)


def shrink(system: System, current: CpuSet, free: CpuSet, count: int, o: Options) -> CpuSet:
    """Which ``count`` of ``current`` to give back, one CPU at a time."""
    released = CpuSet()
    for _ in range(min(count, len(current))):
        held = current - released
        from_here = _best_local(system, held, free | released, -1, o) or held
        released = released | release_order(system, from_here, 1)
    return released
