"""Composite balloons (``components``): a balloon whose CPUs are the union of component
balloons of other types, each sized to an equal share and placed by its own type's rules
(its devices, its minCPUs/maxCPUs). ``componentCreation: balance-balloons`` makes one
component, of the component type with the fewest instances (counting, as upstream's
balloonsByDefIncludingComponents does, every live balloon of that type or of a type it is
made of, on its own or as a component; ties go to the first listed); the default (``all``)
one of each."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence

from nri_resmgr.config.models import BalloonType
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.balloons.balloon import Balloon


def _all(balloons: list[Balloon]) -> Iterator[Balloon]:
    for b in balloons:
        yield b
        yield from _all(b.components)


def instances(balloons: list[Balloon], name: str) -> int:
    """Balloons of type ``name`` among ``balloons``, whether on their own or as components."""
    return sum(1 for b in _all(balloons) if b.type.name == name)


def _family(types: dict[str, BalloonType], name: str) -> set[str]:
    """``name`` and every type its balloons are made of, transitively."""
    family: set[str] = set()
    pending = [name]
    while pending:
        current = pending.pop()
        if current in family:
            continue
        family.add(current)
        if (t := types.get(current)) is not None:
            pending.extend(c.balloon_type for c in t.components)
    return family


def related_instances(types: dict[str, BalloonType], balloons: list[Balloon], name: str) -> int:
    """Live balloons, components included, of type ``name`` or of a type it is made of."""
    family = _family(types, name)
    return sum(1 for b in _all(balloons) if b.type.name in family)


def components(
    types: Sequence[BalloonType], balloons: list[Balloon], t: BalloonType
) -> list[Balloon] | None:
    """New, empty component balloons for a composite balloon of ``t``; ``types`` are the
    configured types and ``balloons`` the live ones (instances are counted among them)."""
    by_name = {x.name: x for x in types}
    wanted = [by_name[c.balloon_type] for c in t.components if c.balloon_type in by_name]
    if len(wanted) != len(t.components):
        return None
    if t.component_creation == "balance-balloons":
        counts = [(related_instances(by_name, balloons, w.name), i) for i, w in enumerate(wanted)]
        wanted = [wanted[min(counts)[1]]]
    out = []
    for w in wanted:
        inner = components(types, balloons, w) if w.components else []
        if inner is None:
            return None
        out.append(Balloon(w, instances(balloons, w.name), CpuSet(), components=inner))
    return out


def resize(resize_one: Callable[[Balloon, int], bool], b: Balloon, count: int) -> bool:
    """Give each component an equal share of ``count`` CPUs (rounded up, within the
    component type's minCPUs/maxCPUs) with ``resize_one``; all or nothing."""
    before = [(c, c.cpus) for c in _all(b.components)]
    share = count * 1000 // len(b.components)
    for comp in b.components:
        t = comp.type
        n = math.ceil(share / 1000)
        n = max(n, t.min_cpus)
        n = min(n, t.max_cpus) if t.max_cpus > 0 else n
        ok = resize_one(comp, n)
        # The composite holds what its components hold, so that free() stays right.
        b.cpus = CpuSet.union_all(c.cpus for c in b.components)
        if not ok:
            for c, cpus in before:
                c.cpus = cpus
            b.cpus = CpuSet.union_all(c.cpus for c in b.components)
            return False
    return True
