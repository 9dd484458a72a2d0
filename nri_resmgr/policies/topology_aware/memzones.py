"""Memory zones and offers (nri-plugins' libmem), for topology-aware placement.

Every container's memory is a request of some bytes for some memory types, assigned to a
*zone*: a set of NUMA nodes (its cpuset.mems). A request starts in the zone of the pool its
CPUs come from (that pool's nodes of the wanted types). A zone is *overcommitted* when the
requests that fit inside it (assigned to it or to a subset of its nodes) need more than its
nodes hold; then requests are moved out to a wider zone — the zone plus the closest nodes of
its types (then of DRAM, PMEM, HBM) — lowest priority first (QoS class), smaller and newer
first, until nothing is overcommitted. If that cannot be done the request fails.

An *offer* is what the allocation would be for one pool, computed and undone without
changing anything; pool scoring compares offers (``scoring.score``), and the chosen pool's
offer is committed. Node masks are ints (bit n = NUMA node n): zones are compared and unioned
a lot.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Iterator

import attrs

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.allocations import BY_CONTAINER_ID, Allocation
from nri_resmgr.policies.topology_aware.memory import (
    BURSTABLE,
    GUARANTEED,
    PRESERVED,
    MemoryWant,
    memory_want,
)
from nri_resmgr.sysfs import MemoryType, System

log = logging.getLogger(__name__)

__all__ = ["MemoryAllocator", "Offer"]

# The expansion types tried, cumulatively, after a zone's own types.
_EXTRA_TYPES = (MemoryType(0), MemoryType.DRAM, MemoryType.PMEM, MemoryType.HBM)


def _bits(mask: int) -> Iterator[int]:
    node = 0
    while mask:
        if mask & 1:
            yield node
        mask >>= 1
        node += 1


def _mask(nodes: Iterable[int]) -> int:
    out = 0
    for n in nodes:
        out |= 1 << n
    return out


@functools.lru_cache(maxsize=1024)
def to_cpuset(mask: int) -> CpuSet:
    # Shared: every refresh asks each container's zone, and a shared set makes the unchanged
    # case an identity comparison with the mems the container holds.
    return CpuSet(_bits(mask))


@attrs.define
class _Request:
    id: str
    size: int
    types: MemoryType
    priority: int
    created: int
    zone: int = 0


@attrs.frozen
class Offer:
    """The zone a request would get from one pool, and the other requests it would move."""

    zone: int
    moves: dict[str, int]
    types: MemoryType
    """The memory types of the offered zone."""

    @property
    def mems(self) -> CpuSet:
        return to_cpuset(self.zone)

    @property
    def size(self) -> int:
        return self.zone.bit_count()


class MemoryAllocator:
    """Memory requests by container and the zones they are assigned to."""

    def __init__(self, system: System) -> None:
        self.system = system
        self.available = system.memory_types()
        nodes = [n for n in system.nodes.values() if n.memory > 0]
        self._capacity = {n.id: n.memory for n in nodes}
        self.total = sum(self._capacity.values())
        """Bytes of memory on the node: kubelet's capacity (MemTotal), for oom_score_adj."""
        self._type = {n.id: n.memory_type for n in nodes}
        self._all = _mask(self._capacity)
        self._of_type = {
            t: _mask(n for n, nt in self._type.items() if nt is t)
            for t in (MemoryType.DRAM, MemoryType.PMEM, MemoryType.HBM)
        }
        # Per node: (distance, the other memory nodes at it), nearest first.
        self._rings: dict[int, list[tuple[int, int]]] = {}
        for n in nodes:
            rings: dict[int, int] = {}
            for other, d in n.distances.items():
                if other != n.id and other in self._capacity:
                    rings[d] = rings.get(d, 0) | (1 << other)
            self._rings[n.id] = sorted(rings.items())
        # Pure functions of the hardware, asked for on every decision: memoised.
        self._masks: dict[CpuSet, int] = {}
        self._types_of: dict[int, MemoryType] = {}
        # Keyed by the types' int value: a flag enum's own hash is a Python-level call.
        self._starts: dict[tuple[int, int], int] = {}
        self._typed: dict[int, int] = {}
        self._capacities: dict[int, int] = {}
        self._requests: dict[str, _Request] = {}
        self._zones: dict[int, set[str]] = {}
        self._bytes: dict[int, int] = {}
        """Per zone: the bytes of the requests assigned to it."""
        self._created = 0
        self._journal: list[tuple[str, int]] | None = None

    # -- queries --------------------------------------------------------------------------

    def zone_of(self, cid: str) -> CpuSet | None:
        r = self._requests.get(cid)
        return None if r is None else to_cpuset(r.zone)

    def zones(self) -> dict[str, CpuSet]:
        return {cid: to_cpuset(r.zone) for cid, r in self._requests.items()}

    def typed(self, mems: CpuSet, types: MemoryType) -> int:
        """The nodes of ``mems`` holding memory of ``types``."""
        return self._mask_of(mems) & self.typed_mask(types)

    def zone_types(self, zone: int) -> MemoryType:
        out = self._types_of.get(zone)
        if out is None:
            out = MemoryType(0)
            for n in _bits(zone & self._all):
                out |= self._type[n]
            self._types_of[zone] = out
        return out

    def _mask_of(self, mems: CpuSet) -> int:
        mask = self._masks.get(mems)
        if mask is None:
            mask = self._masks[mems] = _mask(mems) & self._all
        return mask

    def capacity(self, zone: int) -> int:
        out = self._capacities.get(zone)
        if out is None:
            out = self._capacities[zone] = sum(self._capacity[n] for n in _bits(zone & self._all))
        return out

    def usage(self, zone: int) -> int:
        """Bytes of the requests that fit inside ``zone`` (assigned to it or a subset)."""
        return sum(b for z, b in self._bytes.items() if z & zone == z)

    def free(self, zone: int) -> int:
        return self.capacity(zone) - self.usage(zone)

    def room(self, mems: CpuSet) -> int:
        """The most bytes a new request assigned to ``mems`` could hold without moving
        another request out: what ``_fits`` allows (the zone and every zone containing it)."""
        zone = self._mask_of(mems)
        wider = (self.free(z) for z in self._zones if z & zone == zone)
        return max(0, min([self.free(zone), *wider])) if zone else 0

    # -- offers and allocations -----------------------------------------------------------

    def offer(self, cid: str, mems: CpuSet, want: MemoryWant) -> Offer | None:
        """The allocation ``want`` would get starting from pool memory ``mems``; None when
        no zone can hold it. Nothing changes."""
        types = self.zone_types(self._mask_of(mems)) if want.preserve else want.types
        zone = self._initial_zone(self._mask_of(mems), types)
        if not zone:
            return None
        if cid not in self._requests and self._fits(zone, want.amount):
            # The common case: it fits where it starts and nothing has to move.
            return Offer(zone, {}, self.zone_types(zone))
        old = self._requests.get(cid)
        self._journal = []
        try:
            if old is not None:
                self._unassign(old)
            req = self._allocate(cid, mems, want)
            if req is None:
                return None
            moves = {r: self._requests[r].zone for r, _ in self._journal if r != cid}
            return Offer(req.zone, moves, self.zone_types(req.zone))
        finally:
            self._revert()
            if old is not None:
                self._requests[cid] = old
                self._assign(old, old.zone, journal=False)

    def commit(self, cid: str, mems: CpuSet, want: MemoryWant) -> dict[str, CpuSet] | None:
        """Allocate ``want`` for ``cid``; the zones of other containers that had to move (by
        container id), or None when it cannot be held (then nothing is allocated)."""
        if cid in self._requests:
            self.release(cid)
        if want.amount == 0:
            # Most creates (BestEffort): no bytes, so no over-commit to resolve and no one
            # moves; _allocate assigns nothing when it fails. No journal needed.
            return {} if self._allocate(cid, mems, want) is not None else None
        self._journal = []
        req = self._allocate(cid, mems, want)
        if req is None:
            self._revert()
            return None
        moved = {r for r, _ in self._journal if r != cid}
        self._journal = None
        return {r: to_cpuset(self._requests[r].zone) for r in sorted(moved)}

    def release(self, cid: str) -> None:
        req = self._requests.pop(cid, None)
        if req is not None:
            self._unassign(req)

    def clear(self) -> None:
        self._requests.clear()
        self._zones.clear()
        self._bytes.clear()

    def place(self, a: Allocation, mems: CpuSet, want: MemoryWant | None) -> bool:
        """Allocate the memory of a container just granted CPUs in a pool with memory
        ``mems``; whether other containers' zones moved (they need updates)."""
        if want is None:
            return False
        moved = self.commit(a.container_id, mems, want)
        if moved is None:
            log.warning(
                "%s: %d bytes of %s memory fit no zone from %s; memory over-committed",
                a.name,
                want.amount,
                want.types.label(),
                mems,
            )
            return False
        for cid, zone in moved.items():
            log.info("memory of %s moves to nodes %s to make room for %s", cid, zone, a.name)
        return bool(moved)

    def sync(self, allocations: Iterable[Allocation], pool_mems: dict[str, CpuSet]) -> None:
        """Rebuild from allocations stored from outside (restore): each in the zone it holds
        or its pool's zone of its types, in container-id order; a container that does not fit
        is left unaccounted. Nothing changes when every allocation is already accounted (a
        failed update)."""
        placed = [a for a in allocations if a.pod is not None and a.container is not None]
        if {a.container_id for a in placed} == self._requests.keys():
            return
        placed.sort(key=BY_CONTAINER_ID)
        self.clear()
        for a in placed:
            if a.pod is None or a.container is None:
                continue
            want = memory_want(a.pod, a.container, self.available, self.total)
            start = self._restored_start(a.mems, pool_mems.get(a.pool, CpuSet()), want)
            if not self._restore_request(a.container_id, start, want):
                log.warning("%s: its memory fits no zone; not accounted", a.name)

    def _restore_request(self, cid: str, mems: CpuSet, want: MemoryWant) -> bool:
        """``commit`` for ``sync``, which starts empty and ignores who moved: no release and
        no table of moves (a thousand of each on a Synchronize)."""
        self._journal = []
        if self._allocate(cid, mems, want) is None:
            self._revert()
            return False
        self._journal = None
        return True

    def _restored_start(self, held: CpuSet | None, pool: CpuSet, want: MemoryWant) -> CpuSet:
        """Where a restored container's memory starts: the zone it holds when that is its
        pool's zone or a widening of it (spread before the restart), else its pool's."""
        if held is None or want.preserve:
            return pool
        mask = self._mask_of(held)
        start = self._initial_zone(self._mask_of(pool), want.types)
        if mask != self._all and mask & start == start:
            return held
        return pool

    # -- the algorithm --------------------------------------------------------------------

    def _allocate(self, cid: str, mems: CpuSet, want: MemoryWant) -> _Request | None:
        types = self.zone_types(self._mask_of(mems)) if want.preserve else want.types
        zone = self._initial_zone(self._mask_of(mems), types)
        if not zone:
            return None
        self._created += 1
        req = _Request(cid, want.amount, types, want.priority, self._created)
        self._requests[cid] = req
        self._assign(req, zone)
        if req.size == 0 or self._resolve_overcommit(zone):
            return req
        return None

    def _initial_zone(self, zone: int, types: MemoryType) -> int:
        """The pool's zone, widened to the closest nodes of missing types, then narrowed to
        the nodes of the wanted types when it has any."""
        key = (zone, types._value_)  # the value attribute: .value is a Python property
        start = self._starts.get(key)
        if start is None:
            start = self._starts[key] = self._widen_to_types(zone, types)
        return start

    def _widen_to_types(self, zone: int, types: MemoryType) -> int:
        missing = types & ~self.zone_types(zone)
        if missing and zone:
            zone |= self._expand(zone, missing)
        preferred = zone & self.typed_mask(types)
        return preferred or zone

    def typed_mask(self, types: MemoryType) -> int:
        out = self._typed.get(types._value_)
        if out is None:
            out = 0
            for t, mask in self._of_type.items():
                if t & types:
                    out |= mask
            self._typed[types._value_] = out
        return out

    def _expand(self, zone: int, types: MemoryType) -> int:
        """For each of ``types``: the nearest nodes of that type outside ``zone``."""
        new = 0
        for t in (MemoryType.DRAM, MemoryType.PMEM, MemoryType.HBM):
            if t & types:
                new |= self._closest_of_type(zone, t)
        return new

    def _closest_of_type(self, zone: int, t: MemoryType) -> int:
        """The nodes of type ``t`` outside ``zone`` nearest to any node of it."""
        of_type = self._of_type[t] & ~zone
        close, best = 0, -1
        for n in _bits(zone & self._all):
            for distance, ring in self._rings[n]:
                hit = ring & of_type
                if hit:
                    if best < 0 or distance < best:
                        close, best = hit, distance
                    elif distance == best:
                        close |= hit
                    break
        return close

    def _fits(self, zone: int, amount: int) -> bool:
        """Whether ``amount`` more bytes in ``zone`` overcommit no zone: only the zone and
        the zones containing it hold more."""
        if amount == 0:
            return True
        if self.free(zone) < amount:
            return False
        return all(self.free(z) >= amount for z in self._zones if z & zone == zone)

    def _overcommitted(self, nodes: int) -> list[tuple[int, int]]:
        """(zone, bytes over) for zones touching ``nodes``, most users first, subzones first."""
        over = []
        for z in self._zones:
            if z & nodes:
                free = self.free(z)
                if free < 0:
                    over.append((z, -free))
        over.sort(key=functools.cmp_to_key(self._zone_order))
        return over

    def _zone_order(self, a: tuple[int, int], b: tuple[int, int]) -> int:
        """libmem's ZonesByUsersSubzonesFirst: more users, then a subzone, then more nodes,
        then the higher mask first."""
        (z1, _), (z2, _) = a, b
        users = len(self._zones[z2]) - len(self._zones[z1])
        if users:
            return users
        if z1 & z2 == z1:
            return -1
        if z1 & z2 == z2:
            return 1
        return (z2.bit_count() - z1.bit_count()) or (z2 - z1)

    def _resolve_overcommit(self, nodes: int) -> bool:
        over = self._overcommitted(nodes)
        while over:
            moved = 0
            for limit in (BURSTABLE, GUARANTEED, PRESERVED):
                extra = MemoryType(0)
                for t in _EXTRA_TYPES:
                    if t and not (t & self.available):
                        continue
                    extra |= t
                    for zone, amount in over:
                        moved += self._shrink(zone, amount, limit, extra)
                    over = self._overcommitted(nodes)
                    if not over:
                        return True
            if not moved:
                return False
        return True

    def _shrink(self, zone: int, amount: int, limit: int, extra: MemoryType) -> int:
        """Move requests (priority up to ``limit``) out of ``zone`` into it widened by the
        closest nodes of its own types and ``extra``, until ``amount`` bytes moved."""
        users = self._zones.get(zone)
        if not users:
            return 0
        wider = self._expand(zone, self.zone_types(zone) | extra)
        if not wider:
            return 0
        candidates = sorted(
            (self._requests[cid] for cid in users if self._requests[cid].priority <= limit),
            key=lambda r: (r.priority, r.size, -r.created),
        )
        moved = 0
        for req in candidates:
            self._move(req, zone | wider)
            moved += req.size
            if moved >= amount:
                break
        return moved

    # -- bookkeeping ----------------------------------------------------------------------

    def _assign(self, req: _Request, zone: int, journal: bool = True) -> None:
        if journal and self._journal is not None:
            self._journal.append((req.id, req.zone))
        req.zone = zone
        self._zones.setdefault(zone, set()).add(req.id)
        self._bytes[zone] = self._bytes.get(zone, 0) + req.size

    def _unassign(self, req: _Request) -> None:
        users = self._zones.get(req.zone)
        if users is not None and req.id in users:
            users.discard(req.id)
            self._bytes[req.zone] -= req.size
            if not users:
                del self._zones[req.zone]
                del self._bytes[req.zone]

    def _move(self, req: _Request, zone: int) -> None:
        self._unassign(req)
        self._assign(req, zone)

    def _revert(self) -> None:
        """Undo every assignment since the journal started, newest first."""
        journal, self._journal = self._journal or [], None
        for cid, before in reversed(journal):
            req = self._requests.get(cid)
            if req is None:
                continue
            self._unassign(req)
            if before:
                self._assign(req, before, journal=False)
            else:
                del self._requests[cid]
