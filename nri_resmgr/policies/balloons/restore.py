"""Rebuild balloons from the cpusets running containers have (after a restart or a
reconfiguration), so that containers keep their CPUs whenever that is still valid."""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Sequence

import attrs

from nri_resmgr.config.models import BalloonType
from nri_resmgr.cpus.tight import pick_cpus
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.allocations import Allocation, Kind
from nri_resmgr.policies.balloons.balloon import Balloon
from nri_resmgr.policies.balloons.state import Balloons, target_cpus
from nri_resmgr.policies.balloons.types import RESERVED
from nri_resmgr.resmgr.model import Container, Pod

log = logging.getLogger(__name__)


@attrs.frozen
class Live:
    pod: Pod
    container: Container
    type: BalloonType
    request: int
    cpus: CpuSet | None
    mems: CpuSet | None

    @property
    def name(self) -> str:
        return f"{self.pod.namespace}/{self.pod.name}/{self.container.name}"

    def allocation(self) -> Allocation:
        return Allocation(
            self.container.id,
            self.pod.id,
            self.name,
            "",
            Kind.SHARED,
            self.request,
            pod=self.pod,
            container=self.container,
        )


def rebuild(
    state: Balloons, lives: Sequence[Live], fallback: BalloonType | None = None
) -> list[Live]:
    """Recreate the balloons the running containers are in; return the containers that
    could not be matched to one (to be placed afresh). A container its type can never hold
    (above maxCPUs), or sharing a cpuset with containers of other types, was placed in the
    ``fallback`` (default) type, and is restored there."""
    clusters: dict[tuple[str, CpuSet], list[Live]] = defaultdict(list)
    leftovers: list[Live] = []
    if fallback is not None:
        lives = [
            attrs.evolve(live, type=fallback) if _never_fits(live.type, live.request) else live
            for live in lives
        ]
        lives = _mixed_types_fell_back(lives, fallback)
    # The reserved balloon holds the reserved CPUs, and nothing puts a reserved-class
    # container elsewhere: one without any of them ran under another reservation (the
    # configuration changed), so it joins this one's reserved balloon, as upstream does.
    for live in lives:
        if _off_the_reserved_cpus(state, live):
            log.info("%s: cpuset %s holds no reserved CPU (%s)", live.name, live.cpus,
                     state.reserved)  # fmt: skip
            leftovers.append(live)
        elif live.cpus:
            clusters[(live.type.name, live.cpus)].append(live)
        else:
            leftovers.append(live)
    # Reserved first, then in CPU order, so restored instances are numbered predictably.
    order = sorted(clusters, key=lambda k: (k[0] != RESERVED, min(k[1]), k[0]))
    if fallback is not None:
        # There is one reserved balloon: reserved-class containers on another cpuset fell
        # back to the default balloon (they keep their CPUs there).
        for key in [k for k in order if k[0] == RESERVED][1:]:
            moved = [attrs.evolve(live, type=fallback) for live in clusters.pop(key)]
            clusters[(fallback.name, key[1])].extend(moved)
        order = sorted(clusters, key=lambda k: (k[0] != RESERVED, min(k[1]), k[0]))
    for key in order:
        members = clusters[key]
        others = CpuSet.union_all(c for k, c in ((k, k[1]) for k in clusters) if k != key)
        balloon = _restore_balloon(state, members, key[1] - others)
        if balloon is None:
            leftovers += members
            continue
        for live in members:
            state.join(balloon, live.allocation(), live.pod.namespace, fit=False)
    return leftovers


def _mixed_types_fell_back(lives: list[Live], fallback: BalloonType) -> list[Live]:
    """Balloons never share CPUs, so containers with one cpuset are in one balloon; when their
    types differ, the ones that are not of its type fell back to it: the default one."""
    types: dict[CpuSet, set[str]] = defaultdict(set)
    for live in lives:
        if live.cpus:
            types[live.cpus].add(live.type.name)
    return [
        attrs.evolve(live, type=fallback) if live.cpus and len(types[live.cpus]) > 1 else live
        for live in lives
    ]


def _off_the_reserved_cpus(state: Balloons, live: Live) -> bool:
    return bool(
        live.type.name == RESERVED
        and state.reserved
        and live.cpus
        and live.cpus.isdisjoint(state.reserved)
    )


def _never_fits(t: BalloonType, request: int) -> bool:
    # The same refusal as fill.choose and fill._new_balloon (maxCPUs < 0: never a member).
    return t.max_cpus < 0 or (t.max_cpus > 0 and math.ceil(max(1, request) / 1000) > t.max_cpus)


def _restore_balloon(state: Balloons, members: list[Live], own: CpuSet) -> Balloon | None:
    t = members[0].type
    if t.components:
        # Which CPUs were which component's is not known: placed afresh.
        return None
    # CPUs a balloon shares with another one's containers are idle CPUs, not its own; the
    # rest are its own, unless it also borrows idle CPUs nobody else sees (then take the
    # size its members need, tightly).
    need = target_cpus(t, sum(m.request for m in members), True)
    if t.name == RESERVED:
        need = max(need, len(state.reserved & own))
    if t.share_idle_cpus_in_same and len(own) > need:
        keep = state.reserved & own if t.name == RESERVED else CpuSet()
        own = keep | pick_cpus(state.system, own - keep, need - len(keep))
    taken = CpuSet.union_all(b.cpus for b in state.balloons)
    if not own or not own.isdisjoint(taken) or not own.issubset(state.allowed):
        return None
    if t.name != RESERVED and not own.isdisjoint(state.reserved):
        return None  # reserved CPUs moved under it: its members are placed afresh
    if t.max_balloons > 0 and state.instances_of(t) >= t.max_balloons:
        return None
    return state.create(t, cpus=own)
