"""Which balloons there are: the ones each type needs whatever its containers
(``create_min_balloons``), and the fill chain, which balloon of a type a new container joins
(nri-plugins' ``allocateBalloon`` order) or when a new balloon is made for it instead."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence

from nri_resmgr.config.models import BalloonType
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.errors import ConfigError
from nri_resmgr.policies.balloons.balloon import Balloon
from nri_resmgr.policies.balloons.state import Balloons, target_cpus
from nri_resmgr.policies.balloons.types import DEFAULT, RESERVED, creation_order

__all__ = ["choose", "create_min_balloons"]

log = logging.getLogger(__name__)


def create_min_balloons(state: Balloons, types: Sequence[BalloonType], strict: bool = True) -> None:
    """The balloons each type needs (minBalloons, the one default balloon). ``strict``:
    refuse the configuration where they do not fit; otherwise (Synchronize, where the
    running containers hold CPUs already) make each with the CPUs that are free."""
    for t in creation_order(list(types)):
        if t.name == RESERVED and state.reserved and not state.of_type(t):
            # A reserved cpuset: the reserved balloon starts as those CPUs.
            taken = CpuSet.union_all(b.cpus for b in state.balloons)
            state.create(t, cpus=state.reserved - taken)
        while len(state.of_type(t)) < max(t.min_balloons, 1 if t.name == DEFAULT else 0):
            if state.create(t, count=t.min_cpus) is not None:
                continue
            free = len(state.free())
            problem = (
                f"spec.balloonTypes: cannot create {t.min_balloons} balloons of type "
                f"{t.name!r} with minCPUs {t.min_cpus}: only {free} CPUs are free"
            )
            if strict:
                raise ConfigError(problem)
            if not free or state.create(t, count=free) is None:
                log.error("%s; the running containers hold the rest", problem)
                break
            log.warning("%s; made with those, the running containers hold the rest", problem)
    for b in state.balloons:
        if not b.members:
            state.fit(b)


def choose(
    state: Balloons,
    t: BalloonType,
    pod_id: str,
    namespace: str,
    request: int,
    group: str | None = None,
) -> Balloon | None:
    """The balloon of ``t`` a container asking ``request`` mCPU joins, in upstream's order:
    its group's, its pod's (unless preferSpreadingPods), its namespace's or a new one
    (preferPerNamespaceBalloon), then the roomiest existing one or a new one, new first with
    preferNewBalloons; None if none can take it."""
    if t.max_cpus < 0:
        return None
    mine = state.of_type(t)
    free = len(state.free())

    def room(b: Balloon, inflate: bool) -> int:
        cap = len(b.cpus) + (free if inflate else 0)
        cap = min(cap, t.max_cpus) if t.max_cpus > 0 else cap
        return cap * 1000 - b.requested

    def best(cands: list[Balloon], inflate: bool) -> Balloon | None:
        fitting = [b for b in cands if room(b, inflate) >= request]
        if not fitting:
            return None
        return max(fitting, key=lambda b: (room(b, inflate), -len(b.members), -b.index))

    def new() -> Balloon | None:
        return _new_balloon(state, t, request)

    def same_group() -> Balloon | None:
        cands = [b for b in mine if group in b.groups.values() and room(b, True) >= request]
        return best(cands, False) or best(cands, True)

    def same_pod() -> Balloon | None:
        return best([b for b in mine if pod_id in b.pods.values()], True)

    def same_namespace() -> Balloon | None:
        return best([b for b in mine if namespace in b.namespaces.values()], True)

    chain: list[Callable[[], Balloon | None]] = []
    if group is not None:
        chain.append(same_group)
    if not t.prefer_spreading_pods:
        chain.append(same_pod)
    if t.prefer_per_namespace_balloon:
        chain += [same_namespace, new]
    balanced = [lambda: best(mine, False), lambda: best(mine, True)]
    chain += [new, *balanced] if t.prefer_new_balloons else [*balanced, new]
    for method in chain:
        b = method()
        if b is not None:
            return b
    return None


def _new_balloon(state: Balloons, t: BalloonType, request: int) -> Balloon | None:
    """An empty balloon of ``t`` that can grow to ``request``, or a new one if allowed."""
    need = target_cpus(t, request, True)
    if t.max_cpus > 0 and math.ceil(max(1, request) / 1000) > t.max_cpus:
        return None
    empty = [b for b in state.of_type(t) if not b.members]
    if empty:
        b = empty[0]
        return b if len(b.cpus) + len(state.free()) >= need else None
    if t.max_balloons > 0 and state.instances_of(t) >= t.max_balloons:
        return None
    if len(state.free()) < need:
        return None
    return state.create(t)
