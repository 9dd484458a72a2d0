"""Topology-aware placement: the grants (what each container holds), the one object that
keeps them, the decisions that make them and the cpusets they imply.

``Engine`` is composed of its parts: ``Supply`` (the pools, the load placed in them, which
pool a grant fits best), ``Cpusets`` (what a grant means for the runtime) and the
``MemoryAllocator`` (memory zones). The parts read the grants; only the engine writes them.

Every pool's shared CPUs are its sharable CPUs minus every exclusive CPU granted anywhere, so
taking or returning exclusive CPUs changes the cpuset of shared containers in overlapping
pools; ``refresh`` turns those changes into updates.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence

import attrs

from nri_resmgr.config.models import TopologyAwareSpec
from nri_resmgr.cpus import allocate_cpus
from nri_resmgr.cpus.errors import PlacementError
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.allocations import (
    BY_CONTAINER_ID,
    NO_CPUS,
    Allocation,
    AllocationCache,
    Kind,
    follow,
)
from nri_resmgr.policies.topology_aware.affinity import placed_weights
from nri_resmgr.policies.topology_aware.cpusets import Cpusets
from nri_resmgr.policies.topology_aware.hint_sources import container_hints
from nri_resmgr.policies.topology_aware.hints import (
    ContainerHints,
    Granted,
    strict_failure,
    take_cpus,
)
from nri_resmgr.policies.topology_aware.memory import MemoryWant, memory_want
from nri_resmgr.policies.topology_aware.memzones import MemoryAllocator
from nri_resmgr.policies.topology_aware.pools import Pool
from nri_resmgr.policies.topology_aware.preferences import Want, check_required_isolation
from nri_resmgr.policies.topology_aware.supply import Candidate, Supply
from nri_resmgr.resmgr.model import Adjustment, Container, Pod, Update
from nri_resmgr.sysfs import System

__all__ = ["Candidate", "Engine"]

log = logging.getLogger(__name__)


class Engine:
    """The grants of one topology-aware configuration, and their only writer.

    Invariant: the store (an ``AllocationCache``, private) is the only record of what each
    container (and each DRA claim, ``claims.py``) holds; every pool's shared CPUs and load,
    and so every container's wanted cpuset, derive from it. ``supply`` and ``cpusets`` read
    it; the verbs below are the only writers.

    Writes come in two kinds. Grants the engine decides (``grant``, ``store_placed``) and
    what it answers or sends (``adjustment``, ``refresh``) keep the cpusets settled as they
    go, so ``refresh`` checks only the pools whose shared CPUs changed since it last ran.
    Grants it did not decide (``adopt``, ``disown``, ``forget_all``: restore, DRA claims) and
    updates the runtime failed to apply (``resend``) unsettle it: the next ``refresh`` checks
    every container, and the memory zones are derived again from the grants. ``relocate``
    (containers a DRA claim moves up) places their memory itself and unsettles the cpusets.
    No caller unsettles the engine by hand.
    """

    def __init__(
        self,
        system: System,
        spec: TopologyAwareSpec,
        pools: list[Pool],
        allowed: CpuSet,
        reserved: CpuSet,
    ) -> None:
        self._store = AllocationCache()
        self.memory = MemoryAllocator(system)
        """The containers' memory zones (read only outside the engine)."""
        self.supply = Supply(system, spec, pools, allowed, reserved, self._store, self.memory)
        self.cpusets = Cpusets(self.supply, self.memory)
        # What it was built with, as callers read it (the supply's own: none ever changes).
        self.system, self.spec, self.pools = system, spec, pools
        self.allowed, self.reserved = allowed, reserved
        self._settled: list[CpuSet] | None = None
        """The shared sets every grant's cpusets were last brought in line with; None when
        a write the engine did not decide left every container to be checked again."""
        self._zones_stale = False
        """Whether the memory zones must be derived again from the grants (next refresh)."""

    # -- reading the grants ---------------------------------------------------------------

    def allocation(self, container_id: str) -> Allocation | None:
        return self._store.get(container_id)

    def allocations(self) -> list[Allocation]:
        """Every grant, containers' and claims', in the order they were stored."""
        return list(self._store)

    def in_pool(self, pool: str) -> list[Allocation]:
        return self._store.in_pool(pool)

    def exclusive_cpus(self) -> CpuSet:
        """Every CPU held exclusively, by a container or a DRA claim."""
        return self._store.exclusive_cpus()

    # -- grants ---------------------------------------------------------------------------

    def grant(
        self,
        cid: str,
        pod_id: str,
        name: str,
        want: Want,
        hint: str | None = None,
        keep_mems: bool = False,
        pod: Pod | None = None,
        container: Container | None = None,
        verify_hints: bool = False,
    ) -> Allocation:
        """Place a container, falling back to shared CPUs (and then to over-committing the
        roomiest pool) rather than failing; PlacementError only when no CPU is sharable, or
        (``verify_hints``) when the grant fails the container's strict topology hints."""
        topo = None
        if pod is not None and container is not None:
            topo = container_hints(pod, container, self.system)
        a = self._place(cid, pod_id, name, want, hint, keep_mems, pod, container, topo)
        if verify_hints and topo is not None and topo.strict:
            failure = strict_failure(topo, self.system, self._granted(a))
            if failure is not None:
                self.release(cid)
                raise PlacementError(f"{name}: {failure}")
        return a

    def _granted(self, a: Allocation) -> Granted:
        pool = self.pools[self.supply.index.get(a.pool, 0)]
        shared = a.shared_part > 0
        return Granted(
            shared=self.supply.shared_cpus(pool.index) if shared else CpuSet(),
            reserved=self.reserved if a.kind is Kind.RESERVED and a.request else CpuSet(),
            exclusive=a.exclusive,
            mems=self.cpusets.mems_of(a, pool),
        )

    def _place(
        self,
        cid: str,
        pod_id: str,
        name: str,
        want: Want,
        hint: str | None,
        keep_mems: bool,
        pod: Pod | None,
        container: Container | None,
        topo: ContainerHints | None,
    ) -> Allocation:
        request = want.request

        def grant_in(
            pool: str, kind: Kind, exclusive: CpuSet = NO_CPUS, isolated: bool = False
        ) -> Allocation:
            # Built once, where the placement is known (not a root grant then a copy).
            return Allocation(
                cid, pod_id, name, pool, kind, request, exclusive, isolated,
                keep_mems=keep_mems, pod=pod, container=container,
            )  # fmt: skip

        root = self.pools[0].name
        memory = None
        if pod is not None and container is not None:
            memory = memory_want(pod, container, self.memory.available, self.memory.total)
        if (
            want.kind is Kind.RESERVED
            and want.request > 0
            and self._free_reserved(cid) < want.request
        ):
            # nri-plugins supply.AllocateCPU: more than the reserved CPUs have left goes to
            # the normal shared CPUs rather than over-committing the reserved ones; with none
            # at all it is refused like any other grant (never an empty shared set).
            self._check_shared_left(self.pools[0], name, want.request)
            log.warning(
                "%s: needs %d mCPU reserved, only %d available; using normal shared CPUs",
                name,
                want.request,
                self._free_reserved(cid),
            )
            # The pool stays the root, where reserved requests are placed (nri-plugins
            # pools.go allocatePool), so the container gets the root's whole shared set.
            return self._place_memory(self._put(grant_in(root, Kind.SHARED)), memory)
        if not want.kind.takes_load:  # reserved or preserved: in the root, no pool chosen
            return self._place_memory(self._put(grant_in(root, want.kind)), memory)
        weights = self._affinity(cid, pod, container)
        candidate = self.supply.choose(want, hint, weights, memory, topo)
        check_required_isolation(want, candidate is not None and candidate.isolated, name)
        if candidate is None and want.exclusive:
            log.warning(
                "%s: cannot give %d exclusive CPUs (%d mCPU requested); using shared CPUs",
                name,
                want.exclusive,
                want.request,
            )
            want = Want(Kind.SHARED, request=want.request)
            candidate = self.supply.choose(want, hint, weights, memory, topo)
        if candidate is None:
            pool = self._roomiest_pool()
            self._check_shared_left(pool, name, want.request)
            log.warning("%s: shared CPUs over-committed; placing in %s", name, pool.name)
            return self._place_memory(self._put(grant_in(pool.name, want.kind)), memory)
        pool = self.pools[candidate.pool]
        exclusive = NO_CPUS
        if want.exclusive:
            if topo is not None and topo.pick:
                exclusive = take_cpus(
                    self.system, candidate.source, topo, want.exclusive, want.prio
                )
            else:
                exclusive = allocate_cpus(self.system, candidate.source, want.exclusive, want.prio)
        return self._place_memory(
            self._put(grant_in(pool.name, want.kind, exclusive, candidate.isolated)),
            memory,
        )

    def _check_shared_left(self, pool: Pool, name: str, request: int) -> None:
        """PlacementError when a grant on ``pool``'s shared CPUs would have none to run on
        (its cpuset would be empty: the runtime would keep whatever the container had)."""
        if not self.supply.shared_cpus(pool.index):
            raise PlacementError(
                f"{name}: no shared CPU to run on ({request} mCPU requested; every "
                f"allowed CPU is reserved, isolated or exclusive)"
            )

    def _free_reserved(self, cid: str) -> int:
        """mCPU of the reserved CPUs not yet granted to reserved containers (but ``cid``)."""
        granted = sum(
            a.request for a in self._store if a.kind is Kind.RESERVED and a.container_id != cid
        )
        return 1000 * len(self.reserved) - granted

    def _affinity(
        self, cid: str, pod: Pod | None, container: Container | None
    ) -> dict[str, int] | None:
        if pod is None or container is None:
            return None
        return placed_weights(cid, pod, container, self.spec, self._store)

    def _place_memory(self, a: Allocation, memory: MemoryWant | None) -> Allocation:
        pool = self.pools[self.supply.index.get(a.pool, 0)]
        if self.memory.place(a, pool.mems, memory):
            self._settled = None  # other containers' memory zones moved
        return a

    def _roomiest_pool(self) -> Pool:
        shared = self.supply.shared_sets()
        return max(self.pools, key=lambda p: (len(shared[p.index]), -p.index))

    def _put(self, allocation: Allocation) -> Allocation:
        self._store.put(allocation)
        return allocation

    def release(self, cid: str) -> Allocation | None:
        """Forget a container's grant and memory (it stopped, or is granted again)."""
        self.memory.release(cid)
        return self._store.pop(cid)

    def rebind(self, grant: Allocation, container: Container) -> None:
        """Keep ``grant`` for ``container`` as changed (an update that asks for nothing new):
        a reconfiguration re-derives placement from the container as it is now."""
        self._store.put(attrs.evolve(grant, container=container))

    def roll_back(self, container_id: str, held: Allocation | None) -> None:
        """Undo a new grant that could not be answered: the container keeps ``held``, what it
        had before (its memory zone is not placed again)."""
        self.release(container_id)
        if held is not None:
            self._store.put(held)

    # -- answering and keeping the runtime in line -----------------------------------------

    def adjustment(self, a: Allocation, held: Allocation | None = None) -> Adjustment:
        """The adjustment of a container being created (or updated, ``held`` being what it
        had). Its grant is stored as the runtime will hold it: the sets the adjustment sets,
        and ``held``'s where it leaves them alone."""
        cpus, mems = self.cpusets.desired(a)
        adjustment = self.cpusets.adjustment(a, cpus, mems)
        self._store.put(
            a.with_cpusets(
                cpus if cpus is not None or held is None else held.cpus,
                mems if mems is not None or held is None else held.mems,
            )
        )
        return adjustment

    def refresh(self, skip: str | None = None) -> list[Update]:
        """Updates for every container whose cpuset or mems no longer match its grant.

        A container's wanted cpuset depends only on its own grant (kept in line when granted)
        and its pool's shared CPUs, so while no shared set changed there is nothing to do:
        placing a shared container stays O(pools), not O(containers).
        """
        taken = self._store.exclusive_cpus()
        shared = self.supply.shared_sets(taken)
        settled, self._settled = self._settled, shared
        if shared == settled:
            return []
        if self._zones_stale:  # set only with _settled None: never on the return above
            self._derive_zones()
        updates: list[Update] = []
        desired = self.cpusets.desired
        for a in sorted(self._unsettled(shared, settled), key=BY_CONTAINER_ID):
            if a.container_id == skip:
                continue
            cpus, mems = desired(a, taken, shared)
            if cpus is a.cpus and mems is a.mems:
                continue  # the common case, settled: no call at all (follow compares values)
            followed = follow(a, cpus, mems)
            if followed is not None:
                self._store.put(followed.applied)
                updates.append(followed.update)
        return updates

    def _unsettled(self, shared: list[CpuSet], settled: list[CpuSet] | None) -> list[Allocation]:
        """The grants that may need an update: all of them when nothing is settled, else
        those of the pools whose shared CPUs changed (the others' wanted cpusets did not)."""
        if settled is None:
            return list(self._store)
        changed = {
            i for i, (new, old) in enumerate(zip(shared, settled, strict=True)) if new != old
        }
        out: list[Allocation] = []
        index = self.supply.index
        for name in self._store.pool_names():
            # desired() places an allocation of an unknown pool in the root.
            if index.get(name, 0) in changed:
                out.extend(self._store.in_pool(name))
        return out

    def resend(self, container_ids: Sequence[str]) -> None:
        """The runtime failed to apply these containers' updates: what they hold is unknown,
        so the next ``refresh`` sends their cpusets again."""
        for cid in container_ids:
            a = self._store.get(cid)
            if a is not None:
                self._store.put(attrs.evolve(a, cpus=None, mems=None))
        self._unsettle()
        self._derive_zones()  # at once, as before: the next grant places memory among them

    # -- grants decided elsewhere (restore, DRA claims) ------------------------------------

    def adopt(self, grants: Iterable[Allocation]) -> None:
        """Store grants the engine did not decide (read back from the cpusets containers
        run with, a DRA claim's CPUs), each replacing what its container had."""
        self._store.put_all(grants)
        self._unsettle()

    def disown(self, container_id: str) -> None:
        """Drop an adopted grant (a DRA claim's) that no container runs with."""
        if self._store.pop(container_id) is not None:
            self._unsettle()

    def relocate(self, moves: Mapping[str, str]) -> list[tuple[str, str, str]]:
        """Move containers (container id -> pool name) to other pools, keeping what they
        hold otherwise: a DRA claim took the last shared CPUs of their pool. Their memory is
        placed again from the new pool's nodes (widened), and the next ``refresh`` sends
        their new cpusets and mems. The moves made: (container, old pool, new pool)."""
        moved_from: list[tuple[str, str, str]] = []
        for cid, pool in moves.items():
            a = self._store.get(cid)
            if a is None or a.pool == pool:
                continue
            moved_from.append((a.name, a.pool, pool))
            moved = self._put(attrs.evolve(a, pool=pool))
            memory = None
            if a.pod is not None and a.container is not None:
                memory = memory_want(a.pod, a.container, self.memory.available, self.memory.total)
            self.memory.release(cid)  # not left in the old pool's nodes when unaccounted
            self._place_memory(moved, memory)
        self._settled = None  # refresh checks every container: the moved ones included
        return moved_from

    def forget_all(self) -> None:
        """Drop every grant: restore rebuilds them from what the runtime reports."""
        self._store.clear()
        self._unsettle()

    def _unsettle(self) -> None:
        self._settled = None
        self._zones_stale = True

    def _derive_zones(self) -> None:
        self._zones_stale = False
        self.memory.sync(self._store, {p.name: p.mems for p in self.pools})

    # -- for batch placement (batch.place_all) ---------------------------------------------

    def affinity_weights(self, cid: str, pod: Pod, container: Container) -> dict[str, int] | None:
        """The pool weights ``grant`` gives the container's affinities; None without any."""
        return self._affinity(cid, pod, container)

    def store_placed(self, a: Allocation, memory: MemoryWant | None = None) -> Allocation:
        """Store a grant decided outside ``grant`` (by ``Supply.choose``; a container bound
        to a DRA claim, with no memory want) as ``grant`` stores its own."""
        return self._place_memory(self._put(a), memory)
