"""Re-derive grants from the cpusets running containers already have (after a restart or a
reconfiguration), so that containers stay where they are whenever that is still valid."""

from __future__ import annotations

import logging
import operator
from collections import Counter, defaultdict
from collections.abc import Sequence

import attrs

from nri_resmgr.cpus.errors import PlacementError
from nri_resmgr.cpus.tight import pick_cpus
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.allocations import Allocation, Kind
from nri_resmgr.policies.topology_aware.batch import place_all
from nri_resmgr.policies.topology_aware.engine import Engine
from nri_resmgr.policies.topology_aware.live import Live
from nri_resmgr.policies.topology_aware.preferences import Want
from nri_resmgr.resmgr.model import Update

log = logging.getLogger(__name__)

_BY_CONTAINER_ID = operator.attrgetter("container.id")


def restore(
    engine: Engine,
    lives: Sequence[Live],
    strict: bool = False,
    around: Sequence[Allocation] = (),
) -> list[Update]:
    """Rebuild ``engine``'s grants from ``lives`` and return the updates that bring every
    container to them.

    ``around``: grants no container runs with (the DRA claims' entries and the grouped CPUs
    set apart, ``ClaimBook.entries``), adopted before anything is read back or placed. Every
    container is then restored around them, as a new one would be granted: a cpuset that
    reaches into their CPUs is not kept, and a pool whose only shared CPUs are theirs is
    never chosen. (Added afterwards, they would leave a container placed there with no CPU
    to move to, and it would keep running on the claims' CPUs.)

    The result does not depend on the order of ``lives``: they are taken in container-id
    order. A container that cannot be placed at all raises PlacementError when ``strict``
    (a reconfiguration, which is then refused); otherwise (Synchronize) it is logged and
    left alone, never sent an empty cpuset.
    """
    engine.forget_all()
    if around:
        engine.adopt(around)
    lives = sorted(lives, key=_BY_CONTAINER_ID)
    users = _cpu_users(lives)
    pending: list[Live] = []
    # Reserved-class containers running on normal shared CPUs (the reserved ones were full
    # when they came): kept there if that still holds, else granted as they ask.
    fell_back: dict[str, Live] = {}
    for live in lives:
        kind = live.want.kind
        if live.fell_back:
            fell_back[live.container.id] = live
            pending.append(_as_shared(live))
        elif not kind.takes_load:  # reserved or preserved
            _grant(engine, live)
            granted = engine.allocation(live.container.id)
            if granted is not None and granted.kind is Kind.SHARED:
                # The reserved CPUs are full: restored on normal shared CPUs, where it runs.
                engine.release(live.container.id)
                pending.append(_as_shared(live))
        elif not (kind is Kind.EXCLUSIVE and _claim_exclusive(engine, live, users)):
            pending.append(live)
    mixed = [p for p in pending if p.want.kind is Kind.MIXED]
    # What cannot be read back as exclusive may be a container that fell back to shared CPUs.
    others = [p for p in pending if p.want.kind is not Kind.MIXED]
    maybe_shared = _restore_mixed(engine, mixed, others, users)
    maybe_shared += others
    leftovers = [
        fell_back.get(live.container.id, live) for live in _restore_shared(engine, maybe_shared)
    ]
    if leftovers:
        # One line, not one per container: a Synchronize of thousands would spend a good
        # part of its time logging (each one is still said at debug level).
        had_cpuset = sum(1 for live in leftovers if live.cpus is not None)
        log.info("re-allocating %d containers: %d had no cpuset, %d one that cannot be kept",
                 len(leftovers), len(leftovers) - had_cpuset, had_cpuset)  # fmt: skip

    def grant_one(live: Live) -> None:
        try:
            _grant(engine, live)
        except PlacementError:
            if strict:
                raise
            log.exception("%s: left as the runtime has it", live.name)

    if log.isEnabledFor(logging.DEBUG):
        for live in leftovers:
            log.debug("%s: current cpuset %s cannot be kept; re-allocating", live.name, live.cpus)
    place_all(engine, leftovers, grant_one)
    held: list[Allocation] = []
    for live in lives:
        a = engine.allocation(live.container.id)
        # Those read back (``_adopt``) already hold what the runtime has; only granted ones
        # are rewritten, sparing a thousand copies on a Synchronize.
        if a is not None and (a.cpus is not live.cpus or a.mems is not live.mems):
            held.append(a.with_cpusets(live.cpus, live.mems))
    engine.adopt(held)
    return engine.refresh()


def _as_shared(live: Live) -> Live:
    return attrs.evolve(live, want=Want(Kind.SHARED, request=live.want.request))


def _grant(engine: Engine, live: Live) -> None:
    engine.grant(
        live.container.id,
        live.pod.id,
        live.name,
        live.want,
        keep_mems=live.keep_mems,
        pod=live.pod,
        container=live.container,
    )


def _empties_the_root(engine: Engine, claim: CpuSet) -> bool:
    """Whether taking ``claim`` exclusively would leave no shared CPU at all.

    That is the one emptying a grant never does. A lower pool may have been sliced empty
    (the engine slices idle pools, as nri-plugins' SliceableCPUs does), and a claim that
    emptied a busy one would hold CPUs its shared containers run on, which ``_only_mine``
    already refuses."""
    return not (engine.supply.shared_cpus(0) - claim)


def _pool_mems(engine: Engine, live: Live) -> CpuSet | None:
    """``live``'s mems where they tell its pool: only where the policy set them. Unpinned
    (pin-memory off, or memory.preserve) they are whatever the runtime last had, say the
    socket's from before a move to a NUMA node, and would draw it back there."""
    return live.mems if engine.spec.pin_memory and not live.keep_mems else None


def _home_pool(engine: Engine, cpus: CpuSet, mems: CpuSet | None) -> int | None:
    containing = [p for p in engine.pools if cpus.issubset(p.cpus)]
    matching = [p for p in containing if mems is not None and p.mems == mems]
    candidates = matching or containing
    if not candidates:
        return None
    return max(candidates, key=lambda p: (p.depth, -p.index)).index


def _adopt(engine: Engine, live: Live, pool: int, kind: Kind, exclusive: CpuSet) -> None:
    engine.adopt([_read_back(engine, live, pool, kind, exclusive)])


def _read_back(engine: Engine, live: Live, pool: int, kind: Kind, exclusive: CpuSet) -> Allocation:
    """The allocation of a container kept where it runs: it holds what the runtime has."""
    return Allocation(
        live.container.id,
        live.pod.id,
        live.name,
        engine.pools[pool].name,
        kind,
        live.want.request,
        exclusive=exclusive,
        isolated=bool(exclusive) and exclusive.issubset(engine.supply.isolated),
        cpus=live.cpus,
        mems=live.mems,
        keep_mems=live.keep_mems,
        pod=live.pod,
        container=live.container,
    )


def _cpu_users(lives: Sequence[Live]) -> dict[int, int]:
    """How many containers taking load have each CPU in their cpuset: not reserved or
    preserved ones, but reserved-class ones that fell back to shared CPUs (they run there)."""
    # Containers of one pool report the same cpuset: count each set once (a big machine's
    # sets hold thousands of CPUs).
    sets = Counter(
        live.cpus for live in lives if live.cpus and (live.want.kind.takes_load or live.fell_back)
    )
    users: dict[int, int] = defaultdict(int)
    for cpus, n in sets.items():
        for cpu in cpus.ids():
            users[cpu] += n
    return users


def _only_mine(cpus: CpuSet, users: dict[int, int]) -> bool:
    return all(users.get(cpu, 0) == 1 for cpu in cpus)


def _claim_exclusive(engine: Engine, live: Live, users: dict[int, int]) -> bool:
    cpus = live.cpus
    if not cpus or len(cpus) != live.want.exclusive or not _only_mine(cpus, users):
        return False
    supply = engine.supply
    free = (supply.sharable[0] | supply.isolated) - engine.exclusive_cpus()
    pool = _home_pool(engine, cpus, _pool_mems(engine, live))
    if pool is None or not cpus.issubset(free) or _empties_the_root(engine, cpus - supply.isolated):
        return False
    _adopt(engine, live, pool, Kind.EXCLUSIVE, cpus)
    return True


def _restore_mixed(
    engine: Engine, mixed: list[Live], witnesses: list[Live], users: dict[int, int]
) -> list[Live]:
    # Containers in one pool all carry that pool's shared CPUs; with two or more of them,
    # the CPUs they have in common are the shared part and the rest is each one's own.
    groups: dict[int, list[Live]] = defaultdict(list)
    seen: dict[int, list[CpuSet]] = defaultdict(list)
    leftovers: list[Live] = []
    for live in mixed:
        pool = _home_pool(engine, live.cpus, _pool_mems(engine, live)) if live.cpus else None
        if pool is None:
            leftovers.append(live)
        else:
            groups[pool].append(live)
            seen[pool].append(live.cpus)  # type: ignore[arg-type]
    if not groups:
        return leftovers  # no mixed container to witness for: skip a pass over all others
    homes: dict[tuple[CpuSet, CpuSet | None], int | None] = {}
    for w in witnesses:
        if not w.cpus:
            continue
        # Witnesses are mostly shared containers, a few distinct (cpus, mems) among them.
        key = (w.cpus, _pool_mems(engine, w))
        if key not in homes:
            homes[key] = _home_pool(engine, *key)
        pool = homes[key]
        if pool in groups:
            seen[pool].append(w.cpus)
    supply = engine.supply
    for pool, members in groups.items():
        sets = seen[pool]
        common = sets[0]
        for s in sets[1:]:
            common = common & s
        for live in members:
            assert live.cpus is not None
            taken = engine.exclusive_cpus()
            free = (supply.sharable[pool] | supply.isolated_of[pool]) - taken
            own = live.cpus - common if len(sets) > 1 else CpuSet()
            if live.cpus & supply.isolated:
                # Isolated CPUs are never shared, so they can only be this one's own.
                own = live.cpus & supply.isolated
            if len(sets) > 1 and not own:
                leftovers.append(live)  # it has only the common, shared CPUs
                continue
            if (
                len(own) != live.want.exclusive
                or not own.issubset(free)
                or not _only_mine(own, users)
            ):
                usable = (live.cpus & free) - supply.isolated
                if len(usable) <= live.want.exclusive:
                    leftovers.append(live)
                    continue
                picked = _own_part(engine, usable, live.want.exclusive, users)
                if picked is None:
                    leftovers.append(live)  # every CPU it has runs others too: shared
                    continue
                own = picked
            if _empties_the_root(engine, own - supply.isolated):
                leftovers.append(live)
                continue
            _adopt(engine, live, pool, Kind.MIXED, own)
    return leftovers


def _own_part(engine: Engine, usable: CpuSet, count: int, users: dict[int, int]) -> CpuSet | None:
    """A mixed container's own CPUs among ``usable`` when no container of its pool tells
    them apart: exactly ``count`` of them that no other container runs on (a container of
    an overlapping pool witnesses the rest as shared); None when other containers run on
    every one of them (it holds none: it runs as shared); else any ``count``, picked."""
    alone = CpuSet([cpu for cpu in usable if users.get(cpu, 0) == 1])
    if len(alone) == count:
        return alone
    if not alone:
        return None
    return pick_cpus(engine.system, usable, count)


def _restore_shared(engine: Engine, shared: list[Live]) -> list[Live]:
    shared_sets = engine.supply.shared_sets()
    by_set: dict[CpuSet, list[int]] = defaultdict(list)
    for p in engine.pools:
        by_set[shared_sets[p.index]].append(p.index)
    # The containers of a pool report the same (cpus, mems): choose its pool once per pair.
    chosen: dict[tuple[CpuSet | None, CpuSet | None], int | None] = {}
    leftovers: list[Live] = []
    # Shared grants take no CPUs, so by_set holds through the loop: stored in one batch.
    kept: list[Allocation] = []
    no_cpus = CpuSet()
    for live in shared:
        key = (live.cpus, _pool_mems(engine, live))
        if key in chosen:
            best = chosen[key]
        else:
            best = chosen[key] = _shared_pool(engine, by_set, *key)
        if best is None:
            leftovers.append(live)
            continue
        kept.append(_read_back(engine, live, best, Kind.SHARED, no_cpus))
        if live.want.kind is not Kind.SHARED:
            log.info("%s: restored as shared (exclusive CPUs were not available)", live.name)
    engine.adopt(kept)
    return leftovers


def _shared_pool(
    engine: Engine, by_set: dict[CpuSet, list[int]], cpus: CpuSet | None, mems: CpuSet | None
) -> int | None:
    """The deepest pool whose shared CPUs are ``cpus`` (one with memory ``mems`` first)."""
    pools = by_set.get(cpus, []) if cpus else []
    if not pools:
        return None
    matching = [i for i in pools if engine.pools[i].mems == mems]
    return max(matching or pools, key=lambda i: (engine.pools[i].depth, -i))
