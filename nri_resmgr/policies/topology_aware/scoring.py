"""Which fitting pool a container goes to: nri-plugins' ``pools.go`` compareScores, in order.

Only pools that can take the request are compared (the engine's fit check stands for
upstream's "insufficient isolated, reserved or shared capacity loses"), so the order is:

1. a pool with enough isolated CPUs wins (for a request that prefers isolated CPUs);
2. the higher affinity score wins;
3. topology hints (``hints.py``): the higher combined score wins; with every pool at zero,
   the higher product of the non-zero scores; a tie with some score decides here: the
   deeper pool, then the lower upstream id;
4. memory: the better matching offer, then offer burstability — ``memory_offer``;
5. a Burstable container with a CPU limit: a pool whose free shared CPU covers the limit
   wins; one without a limit: a pool at its unlimitedBurstable level wins, then (both at the
   level) more free shared CPU, then the lower upstream id; otherwise (neither at the level)
   a pool below the level beats one above it, then the lower upstream id;
6. memory: the tighter offer, the matching memory type — ``memory_fit``;
7. (CPU classes: not modelled here, a tie); a high or low CPU priority preference: a pool
   whose free CPUs of that priority cover the request wins (``prio``);
8. the deeper pool wins;
9. an isolated request: more isolated capacity wins, then the lower upstream id;
9a. a normal CPU priority preference: a pool whose free normal CPUs cover the request wins;
10. an exclusive request: more shared capacity left wins, then the lower upstream id;
11. a shared-only request: fewer colocated containers win, then more shared capacity;
12. the lower upstream id wins.

Upstream ids number the pools depth-first, children before their parent (``DepthFirst`` is
post-order), so "lower id" prefers the leftmost and, among relatives, the deeper pool.
"""

from __future__ import annotations

import functools

import attrs

from nri_resmgr.cpus import Priority
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.topology_aware.memory import MemoryWant
from nri_resmgr.policies.topology_aware.memzones import MemoryAllocator, Offer
from nri_resmgr.policies.topology_aware.pools import Pool

LEVEL_VALUES = {"system": 1, "package": 2, "die": 3, "numa": 4, "l3cache": 5}
"""nri-plugins' CPUTopologyLevel values (pkg/apis/config/v1alpha1/resmgr/policy/config.go)."""


@attrs.frozen
class Ask:
    """What of the request the comparison reads."""

    full: int = 0
    """Exclusive CPUs asked for."""
    isolate: bool = False
    burstable: bool = False
    """QoS class Burstable."""
    limit: int | None = None
    """mCPU CPU limit of a Burstable container; None is unlimited."""
    level: str = "package"
    """Unlimited Burstable: the (existing) topology level it prefers."""
    prio: Priority = Priority.NONE
    """The preferred CPU priority (``prefer-cpu-priority``, ``defaultCPUPriority``)."""


@attrs.frozen
class PoolScore:
    pool: int
    """Engine pool index."""
    upstream_id: int
    depth: int
    level: str
    isolated: int
    """Isolated CPUs left after the request (negative: not enough); 0 unless asked for."""
    shared: int
    """mCPU of shared capacity left after the request."""
    free: int
    """mCPU of shared capacity before the request (upstream AllocatableSharedCPU)."""
    colocated: int
    """Containers placed in this very pool (reserved and preserved ones not counted)."""
    affinity: float = 0.0
    prio: int = 0
    """mCPU of free CPUs of the preferred priority left after the request (negative: too
    few; upstream score.PrioCapacity); 0 without a preference."""
    memory: tuple[int, ...] = ()
    """The memory criteria as a key where larger wins (``score``): offer, exact
    types, burstability, then tightness and having the type; empty without a memory want."""
    hints: tuple[float, float] | None = None
    """Topology hint score: the product of the hints' scores and of the non-zero ones
    (``hints.combine``); None when the container has no hints."""


def find_existing_level(levels_postorder: list[str], level: str) -> str:
    """nri-plugins findExistingTopologyLevel: ``level`` if a pool has it, else the level of
    the first pool (children before parents) above it, else package."""
    want = LEVEL_VALUES.get(level, 0)
    for lv in levels_postorder:
        value = LEVEL_VALUES.get(lv, 0)
        if value == want:
            return lv
        if value < want:
            return lv
    return "package"


def memory_offer(ask: Ask, a: PoolScore, b: PoolScore) -> int:
    """Upstream "better matching offer" (an offer beats none, then the exact memory types)
    and "memory offer burstability"; <0 prefers ``a``."""
    return _larger(a.memory[:3], b.memory[:3])


def memory_fit(ask: Ask, a: PoolScore, b: PoolScore) -> int:
    """Upstream "tighter memory offer" and "matching memory type"; <0 prefers ``a``."""
    return _larger(a.memory[3:], b.memory[3:])


def _larger(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    return -1 if a > b else 1 if a < b else 0


def _by_id(a: PoolScore, b: PoolScore) -> int:
    return -1 if a.upstream_id < b.upstream_id else 1 if a.upstream_id > b.upstream_id else 0


def _more(x: float, y: float) -> int:
    """-1 when the first is larger (it wins), 1 when smaller, 0 on a tie."""
    return -1 if x > y else 1 if x < y else 0


def compare(ask: Ask, a: PoolScore, b: PoolScore) -> int:
    """<0 when pool ``a`` is the better choice, >0 when ``b`` is; see the module docstring."""
    if ask.isolate and (a.isolated >= 0) != (b.isolated >= 0):
        return -1 if a.isolated >= 0 else 1
    if order := _more(a.affinity, b.affinity):
        return order
    if a.hints is not None and (order := _hints(a, b)):
        return order
    if order := memory_offer(ask, a, b):
        return order
    if ask.burstable:
        if ask.limit is not None:
            enough_a, enough_b = a.free >= ask.limit, b.free >= ask.limit
            if enough_a != enough_b:
                return -1 if enough_a else 1
        else:
            return _unlimited(ask, a, b)
    if order := memory_fit(ask, a, b):
        return order
    if ask.prio in (Priority.HIGH, Priority.LOW) and (order := _prio_fits(a, b)):
        return order
    if order := _more(a.depth, b.depth):
        return order
    if ask.isolate and (a.isolated > 0 or b.isolated > 0):
        return _more(a.isolated, b.isolated) or _by_id(a, b)
    if ask.prio is Priority.NORMAL and (order := _prio_fits(a, b)):
        return order
    if ask.full and (a.shared > 0 or b.shared > 0):
        return _more(a.shared, b.shared) or _by_id(a, b)
    if order := _more(-a.colocated, -b.colocated):
        return order
    return _more(a.shared, b.shared) or _by_id(a, b)


def _prio_fits(a: PoolScore, b: PoolScore) -> int:
    """The pool with enough CPUs of the preferred priority wins; both or neither: a tie."""
    fits_a, fits_b = a.prio >= 0, b.prio >= 0
    return 0 if fits_a == fits_b else -1 if fits_a else 1


def _hints(a: PoolScore, b: PoolScore) -> int:
    """Upstream compareScores "better topology hint score wins", whose tie with any non-zero
    score is settled here by depth and id rather than by the later criteria."""
    (ha, na), (hb, nb) = a.hints or (0.0, 0.0), b.hints or (0.0, 0.0)
    if order := _more(ha, hb):
        return order
    if ha == 0.0 and (order := _more(na, nb)):
        return order
    if ha != 0.0 or na != 0.0:
        return _more(a.depth, b.depth) or _by_id(a, b)
    return 0


def _unlimited(ask: Ask, a: PoolScore, b: PoolScore) -> int:
    at_a, at_b = a.level == ask.level, b.level == ask.level
    if at_a != at_b:
        return -1 if at_a else 1
    if at_a:
        return _more(a.free, b.free) or _by_id(a, b)
    target = LEVEL_VALUES.get(ask.level, 0)
    va, vb = LEVEL_VALUES.get(a.level, 0), LEVEL_VALUES.get(b.level, 0)
    # Below the level beats above it. (Upstream's mirrored case also answers "a wins", which
    # makes its sort order depend on the input order; here it is symmetric.)
    if va > target > vb:
        return -1
    if vb > target > va:
        return 1
    return _by_id(a, b)


def best(ask: Ask, scores: list[PoolScore]) -> PoolScore:
    def cmp(a: PoolScore, b: PoolScore) -> int:
        return compare(ask, a, b)

    return min(scores, key=functools.cmp_to_key(cmp))


def children_first(pools: list[Pool]) -> list[int]:
    """Pool indices in nri-plugins' id order: depth-first, each parent after its children."""
    return sorted(range(len(pools)), key=lambda i: _postorder_key(pools, i))


def _postorder_key(pools: list[Pool], index: int) -> tuple[int, ...]:
    """Sorts pools children-first: the path of child positions from the root, with a parent
    after all of its children."""
    path: list[int] = []
    node = pools[index]
    while node.parent is not None:
        path.append(pools[node.parent].children.index(node.index))
        node = pools[node.parent]
    return (*reversed(path), len(pools))


def memory_key(
    alloc: MemoryAllocator, pool_mems: CpuSet, want: MemoryWant | None
) -> tuple[int, ...]:
    """Pool scoring's memory criterion for ``want`` in a pool with memory ``pool_mems``
    (empty when there is no memory request to weigh: callers placing without a container)."""
    if want is None:
        return ()
    return score(alloc.offer(want.container_id, pool_mems, want), want, pool_mems, alloc)


def score(
    offer: Offer | None, want: MemoryWant, pool_mems: CpuSet, alloc: MemoryAllocator
) -> tuple[int, ...]:
    """The memory criteria of nri-plugins' compareScores, as a key where larger wins:
    an offer beats none; an offer of exactly the wanted types wins; with a limit above the
    request, a pool whose memory of those types covers the limit (no limit: more memory);
    then the tighter offer (fewer nodes); then a pool that has the wanted types at all."""
    if offer is None:
        return (0, 0, 0, 0, 0)
    types = want.types
    typed = alloc.typed(pool_mems, types)
    burst = 0
    if want.amount != want.limit:
        capacity = alloc.capacity(typed)
        burst = int(capacity >= want.limit) if want.limit else capacity
    return (1, int(offer.types == types), burst, -offer.size, int(bool(typed)))
