"""What each container got from the policy: the bookkeeping behind every placement decision.

Policies keep one ``AllocationCache``. It is in memory only: after a restart, a policy rebuilds
it in Synchronize from the cpusets the runtime reports, so running containers stay put.
"""

from __future__ import annotations

import enum
import functools
import logging
import operator
from collections.abc import Iterable, Iterator, Mapping
from typing import NamedTuple, Protocol

import attrs

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.resmgr.model import Adjustment, Container, Pod, Update

log = logging.getLogger(__name__)


class Kind(enum.Enum):
    """How a grant holds CPUs, and the rules that follow from it, each stated once here."""

    SHARED = "shared"
    EXCLUSIVE = "exclusive"
    MIXED = "exclusive+shared"
    RESERVED = "reserved"
    PRESERVE = "preserve"

    takes_load: bool
    """Whether the grant counts in its pool's load: reserved and preserved ones take nothing
    from a pool's shared CPUs. (Set once per member below: a plain attribute, read on every
    grant, where a property would cost a call.)"""
    uses_shared: bool
    """Whether the grant runs on its pool's shared CPUs: shared and mixed ones do."""

    def shared_part(self, request: int) -> int:
        """mCPU of ``request`` a grant of this kind takes from its pool's shared CPUs: all
        of a shared one, a mixed one's fraction of a CPU (its whole CPUs are exclusive),
        none of the others."""
        if self is Kind.SHARED:
            return request
        return request % 1000 if self is Kind.MIXED else 0


for _kind in Kind:
    _kind.takes_load = _kind not in (Kind.RESERVED, Kind.PRESERVE)
    _kind.uses_shared = _kind in (Kind.SHARED, Kind.MIXED)


BY_CONTAINER_ID = operator.attrgetter("container_id")
"""The sort key of allocations in container-id order (a C call, not a lambda per item)."""

NO_CPUS = CpuSet()
"""No exclusive CPUs: a CpuSet never changes, so one instance serves every shared grant."""


@attrs.frozen
class Allocation:
    container_id: str
    pod_id: str
    name: str
    """ns/pod/container, for logs."""
    pool: str
    """The topology-aware pool or the balloon instance."""
    kind: Kind
    request: int
    """mCPU requested (the shared part's weight)."""
    exclusive: CpuSet = NO_CPUS
    """CPUs held by this container alone (empty for shared containers)."""
    isolated: bool = False
    cpus: CpuSet | None = None
    """The cpuset last applied to the container; None when the policy leaves it alone."""
    mems: CpuSet | None = None
    keep_mems: bool = False
    """memory.preserve: the policy leaves cpuset.mems alone."""
    pod: Pod | None = attrs.field(default=None, eq=False, repr=False)
    container: Container | None = attrs.field(default=None, eq=False, repr=False)
    """The pod and container as placed: a reconfiguration re-derives the grant from them, so
    a policy keeps no pod/container maps (the runtime is the one record of what runs)."""

    @property
    def shared_part(self) -> int:
        """mCPU this grant takes from its pool's shared CPUs (``Kind.shared_part``)."""
        return self.kind.shared_part(self.request)

    def with_cpusets(self, cpus: CpuSet | None, mems: CpuSet | None) -> Allocation:
        """This grant as the runtime holds it with ``cpus`` and ``mems``: ``attrs.evolve``
        without its per-field walk (a third of the cost, on every create and refresh)."""
        return Allocation(
            self.container_id, self.pod_id, self.name, self.pool, self.kind, self.request,
            self.exclusive, self.isolated, cpus, mems, self.keep_mems, self.pod, self.container,
        )  # fmt: skip

    @property
    def zero_request(self) -> bool:
        """A shared container asking no CPU (BestEffort, 0-request Burstable): nri-plugins
        counts 1 mCPU of shared capacity for a pool holding any (AllocatableSharedCPU)."""
        return self.kind is Kind.SHARED and self.request == 0


@attrs.frozen
class Followed:
    """An update for the runtime and the allocation as the runtime holds it once applied."""

    applied: Allocation
    update: Update


def follow(a: Allocation, cpus: CpuSet | None, mems: CpuSet | None) -> Followed | None:
    """The update that brings ``a``'s container to (cpus, mems); None when nothing changes.

    The policy's view follows the runtime: a field the policy leaves alone (None) keeps what
    the runtime has, and an empty cpuset is never sent, since the runtime would read it as
    "no change" and the view would drift from what the container really has.
    """
    held_cpus, held_mems = a.cpus, a.mems
    # Identity first: a refresh hands the same set objects to a pool's containers; and
    # nothing held differs from any set (a container restore just placed): no __eq__ call.
    send_cpus = cpus is not None and cpus is not held_cpus
    if send_cpus and held_cpus is not None:
        send_cpus = cpus != held_cpus
    send_mems = mems is not None and mems is not held_mems
    if send_mems and held_mems is not None:
        send_mems = mems != held_mems
    if send_cpus and not cpus:
        log.error("%s: no CPU left in %s; it keeps cpuset %s", a.name, a.pool, a.cpus)
        send_cpus = False
    if not (send_cpus or send_mems):
        return None
    adjustment = _setting(cpus if send_cpus else None, mems if send_mems else None)
    applied = a.with_cpusets(cpus if send_cpus else held_cpus, mems if send_mems else held_mems)
    return Followed(applied, Update(a.container_id, adjustment))


@functools.lru_cache(maxsize=256)
def _setting(cpus: CpuSet | None, mems: CpuSet | None) -> Adjustment:
    """The Adjustment that sets ``cpus`` and ``mems`` (None: left alone). Frozen, so one
    serves every container moved to the same sets (a refresh moves a pool's containers
    together); its wire encoding is then looked up once per run (``wire.updates_field``)."""
    return Adjustment(
        cpuset_cpus=None if cpus is None else str(cpus),
        cpuset_mems=None if mems is None else str(mems),
    )


def _takes_the_same(a: Allocation, b: Allocation) -> bool:
    """Whether ``a`` and ``b`` take the same from their pool (what the cache totals)."""
    return (
        a.pool == b.pool
        and a.kind is b.kind
        and a.request == b.request
        and (a.exclusive is b.exclusive or a.exclusive == b.exclusive)
    )


class PoolLoad(NamedTuple):
    """What a pool's containers take from it (reserved and preserved ones not counted)."""

    shared_mcpu: int = 0
    shared_users: int = 0
    containers: int = 0
    zero_requests: int = 0
    """Shared containers asking no CPU (``Allocation.zero_request``)."""

    @property
    def shared_need(self) -> int:
        """mCPU the shared CPUs must hold for these containers (``shared_need``)."""
        return shared_need(self.shared_mcpu, self.zero_requests)


def shared_need(mcpu: int, zero_requests: int) -> int:
    """Shared mCPU asked, plus 1 where some containers ask none, so that they are never left
    without a CPU (nri-plugins' AllocatableSharedCPU counts them so)."""
    return mcpu + 1 if zero_requests else mcpu


_NO_LOAD = PoolLoad()


class AllocationView(Protocol):
    """The read side of an ``AllocationCache``: what the parts of a policy that must not
    write its grants are given (the owner keeps the cache itself)."""

    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[Allocation]: ...
    def __contains__(self, container_id: object) -> bool: ...
    def get(self, container_id: str) -> Allocation | None: ...
    def loads(self) -> Mapping[str, PoolLoad]: ...
    def in_pool(self, pool: str) -> list[Allocation]: ...
    def pool_names(self) -> list[str]: ...
    def exclusive_cpus(self) -> CpuSet: ...


class AllocationCache:
    """Allocations by container, with the per-pool load and the union of exclusive CPUs kept
    up to date on every change: placement reads them on every decision, so they must not
    cost a walk over every container."""

    def __init__(self) -> None:
        self._by_id: dict[str, Allocation] = {}
        self._loads: dict[str, PoolLoad] = {}
        self._exclusive: CpuSet | None = CpuSet()
        self._members: dict[str, dict[str, None]] = {}
        """Per pool name: its containers' ids (a refresh re-checks only changed pools)."""

    def __len__(self) -> int:
        return len(self._by_id)

    def __iter__(self) -> Iterator[Allocation]:
        return iter(list(self._by_id.values()))

    def __contains__(self, container_id: object) -> bool:
        return container_id in self._by_id

    def get(self, container_id: str) -> Allocation | None:
        return self._by_id.get(container_id)

    def put(self, allocation: Allocation) -> None:
        old = self._by_id.get(allocation.container_id)
        if old is not None and _takes_the_same(old, allocation):
            # A refresh writing the cpusets it sent: loads, members and exclusive CPUs stay.
            self._by_id[allocation.container_id] = allocation
            return
        if old is not None:
            self._forget(old)
        self._insert(allocation)
        self._count(allocation, +1)

    def put_all(self, allocations: Iterable[Allocation]) -> None:
        """``put`` each of ``allocations`` in order, with the loads of new containers summed
        per pool and stored once (a restore puts a thousand into a few pools)."""
        sums: dict[str, PoolLoad] = {}
        for a in allocations:
            if a.container_id in self._by_id:
                self.put(a)  # a replacement: its old load must be taken off first
                continue
            self._insert(a)
            if a.kind.takes_load:
                sums[a.pool] = _plus(sums.get(a.pool, _NO_LOAD), _load_of(a))
        for pool, added in sums.items():
            self._loads[pool] = _plus(self._loads.get(pool, _NO_LOAD), added)

    def _insert(self, a: Allocation) -> None:
        """Store ``a`` as its pool's member; the loads are the caller's to count."""
        self._by_id[a.container_id] = a
        self._members.setdefault(a.pool, {})[a.container_id] = None
        if a.exclusive is not NO_CPUS and a.exclusive:
            self._exclusive = None

    def pop(self, container_id: str) -> Allocation | None:
        old = self._by_id.pop(container_id, None)
        if old is not None:
            self._forget(old)
        return old

    def clear(self) -> None:
        self._by_id.clear()
        self._loads.clear()
        self._members.clear()
        self._exclusive = CpuSet()

    def _forget(self, old: Allocation) -> None:
        members = self._members[old.pool]
        members.pop(old.container_id, None)
        if not members:
            del self._members[old.pool]
        self._count(old, -1)
        if old.exclusive:
            self._exclusive = None

    def _count(self, a: Allocation, sign: int) -> None:
        # _plus(load, _load_of(a), sign) without the PoolLoad in between (twice per create).
        kind = a.kind
        if not kind.takes_load:
            return
        old = self._loads.get(a.pool, _NO_LOAD)
        zero = kind is Kind.SHARED and a.request == 0  # Allocation.zero_request
        self._loads[a.pool] = PoolLoad(
            old.shared_mcpu + sign * kind.shared_part(a.request),
            old.shared_users + sign * kind.uses_shared,
            old.containers + sign,
            old.zero_requests + sign * zero,
        )

    def loads(self) -> dict[str, PoolLoad]:
        """Per pool name: the load of the containers placed there."""
        return self._loads

    def in_pool(self, pool: str) -> list[Allocation]:
        return [self._by_id[cid] for cid in self._members.get(pool, ())]

    def pool_names(self) -> list[str]:
        """The pools holding at least one allocation."""
        return list(self._members)

    def exclusive_cpus(self) -> CpuSet:
        if self._exclusive is None:
            self._exclusive = CpuSet.union_all(a.exclusive for a in self._by_id.values())
        return self._exclusive


def _load_of(a: Allocation) -> PoolLoad:
    """What one load-taking allocation adds to its pool's load."""
    return PoolLoad(a.shared_part, int(a.kind.uses_shared), 1, int(a.zero_request))


def _plus(load: PoolLoad, delta: PoolLoad, sign: int = 1) -> PoolLoad:
    return PoolLoad(
        load.shared_mcpu + sign * delta.shared_mcpu,
        load.shared_users + sign * delta.shared_users,
        load.containers + sign * delta.containers,
        load.zero_requests + sign * delta.zero_requests,
    )
