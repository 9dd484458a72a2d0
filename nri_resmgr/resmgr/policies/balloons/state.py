"""Balloon instances: creation, inflation and deflation, the fill chain that picks a balloon
for a container, and the cpusets that follow from them."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import attrs

from nri_resmgr.config.models import BalloonsSpec, BalloonType
from nri_resmgr.resmgr.cache import Allocation, AllocationCache, follow
from nri_resmgr.resmgr.cpualloc import pick_cpus, release_order
from nri_resmgr.resmgr.cpuset import CpuSet
from nri_resmgr.resmgr.model import Update
from nri_resmgr.sysfs import System

log = logging.getLogger(__name__)


@attrs.define
class Balloon:
    """A live balloon (mutable bookkeeping, owned by ``Balloons``)."""

    type: BalloonType
    index: int
    cpus: CpuSet
    members: dict[str, int] = attrs.field(factory=dict)
    """container id -> mCPU request."""
    pods: dict[str, str] = attrs.field(factory=dict)
    """container id -> pod id."""
    namespaces: dict[str, str] = attrs.field(factory=dict)

    @property
    def name(self) -> str:
        return f"{self.type.name}[{self.index}]"

    @property
    def requested(self) -> int:
        return sum(self.members.values())


def target_cpus(t: BalloonType, requested: int, has_members: bool) -> int:
    """ceil(max(1, requested)/1000) clamped to [minCPUs, maxCPUs]; minCPUs when empty."""
    wanted = math.ceil(max(1, requested) / 1000) if has_members else 0
    wanted = max(wanted, t.min_cpus)
    return min(wanted, t.max_cpus) if t.max_cpus > 0 else wanted


class Balloons:
    def __init__(
        self, system: System, spec: BalloonsSpec, allowed: CpuSet, reserved: CpuSet
    ) -> None:
        self.system = system
        self.spec = spec
        self.allowed = allowed
        self.reserved = reserved
        self.isolated = system.isolated & allowed
        self.balloons: list[Balloon] = []
        self.members = AllocationCache()

    # -- CPUs -----------------------------------------------------------------------------

    def free(self) -> CpuSet:
        # Reserved CPUs are the reserved balloon's even when it does not hold them yet
        # (restored from a container that had only some): never free for other balloons.
        return self.allowed - self.reserved - CpuSet.union_all(b.cpus for b in self.balloons)

    def _pick(self, t: BalloonType, near: CpuSet, count: int) -> CpuSet | None:
        free = self.free()
        if count > len(free):
            return None
        # Isolated CPUs go to types that ask for them, and to others only as a last resort.
        preferred = free & self.isolated if t.prefer_isol_cpus else free - self.isolated
        for pool in self._nearby(near, preferred) + self._nearby(near, free):
            if len(pool) >= count:
                return pick_cpus(self.system, pool, count)
        return None

    def _nearby(self, near: CpuSet, free: CpuSet) -> list[CpuSet]:
        if not near:
            return [free]
        nodes = CpuSet.union_all(self.system.nodes[n].cpus for n in self.system.nodes_of(near))
        packages = CpuSet.union_all(
            self.system.package_cpus(p) for p in {self.system.cpus[c].package for c in near}
        )
        return [free & nodes, free & packages, free]

    def resize(self, b: Balloon, count: int) -> bool:
        """Grow or shrink ``b`` to ``count`` CPUs; False if there are not enough free CPUs."""
        have = len(b.cpus)
        if count > have:
            extra = self._pick(b.type, b.cpus, count - have)
            if extra is None:
                return False
            b.cpus = b.cpus | extra
        elif count < have:
            # The reserved CPUs configured for the reserved balloon are never given away.
            keep = self.reserved if b.type.name == "reserved" else CpuSet()
            giveable = b.cpus - keep
            b.cpus = b.cpus - release_order(self.system, giveable, min(have - count, len(giveable)))
        return True

    def fit(self, b: Balloon) -> None:
        target = target_cpus(b.type, b.requested, bool(b.members))
        if b.type.name == "reserved":
            target = max(target, len(self.reserved & b.cpus))
        if not self.resize(b, target):
            # Grow as far as the free CPUs go rather than not at all.
            self.resize(b, len(b.cpus) + len(self.free()))
            log.warning("%s: wanted %d CPUs, got %d", b.name, target, len(b.cpus))

    # -- instances ------------------------------------------------------------------------

    def of_type(self, t: BalloonType) -> list[Balloon]:
        return [b for b in self.balloons if b.type.name == t.name]

    def by_name(self, name: str) -> Balloon | None:
        return next((b for b in self.balloons if b.name == name), None)

    def create(self, t: BalloonType, cpus: CpuSet | None = None, count: int = 0) -> Balloon | None:
        used = {b.index for b in self.of_type(t)}
        index = next(i for i in range(len(used) + 1) if i not in used)
        if cpus is None:
            picked = self._pick(t, CpuSet(), count) if count else CpuSet()
            if picked is None:
                return None
            cpus = picked
        b = Balloon(t, index, cpus)
        self.balloons.append(b)
        return b

    def remove_if_surplus(self, b: Balloon) -> None:
        if b.members:
            return
        if len(self.of_type(b.type)) > b.type.min_balloons:
            self.balloons.remove(b)
        else:
            self.resize(b, b.type.min_cpus)

    # -- the fill chain -------------------------------------------------------------------

    def choose(self, t: BalloonType, pod_id: str, namespace: str, request: int) -> Balloon | None:
        if t.max_cpus < 0:
            return None
        mine = self.of_type(t)
        free = len(self.free())

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
            return self._new_balloon(t, request)

        def same_pod() -> Balloon | None:
            return best([b for b in mine if pod_id in b.pods.values()], True)

        def same_namespace() -> Balloon | None:
            return best([b for b in mine if namespace in b.namespaces.values()], True)

        chain: list[Callable[[], Balloon | None]] = []
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

    def _new_balloon(self, t: BalloonType, request: int) -> Balloon | None:
        need = target_cpus(t, request, True)
        if t.max_cpus > 0 and math.ceil(max(1, request) / 1000) > t.max_cpus:
            return None
        empty = [b for b in self.of_type(t) if not b.members]
        if empty:
            b = empty[0]
            return b if len(b.cpus) + len(self.free()) >= need else None
        if t.max_balloons > 0 and len(self.of_type(t)) >= t.max_balloons:
            return None
        if len(self.free()) < need:
            return None
        return self.create(t)

    # -- members --------------------------------------------------------------------------

    def join(self, b: Balloon, a: Allocation, namespace: str, fit: bool = True) -> None:
        b.members[a.container_id] = a.request
        b.pods[a.container_id] = a.pod_id
        b.namespaces[a.container_id] = namespace
        self.members.put(attrs.evolve(a, pool=b.name))
        if fit:
            self.fit(b)

    def leave(self, cid: str) -> Balloon | None:
        member = self.members.pop(cid)
        b = self.by_name(member.pool) if member else None
        if b is None:
            return None
        for d in (b.members, b.pods, b.namespaces):
            d.pop(cid, None)
        if b.members:
            self.fit(b)
        else:
            self.remove_if_surplus(b)
        return b

    # -- what it means for the runtime ----------------------------------------------------

    def idle_shared(self, b: Balloon, idle: CpuSet) -> CpuSet:
        scope = b.type.share_idle_cpus_in_same
        if not scope or scope == "thread" or not b.cpus:
            return CpuSet()
        if scope == "system":
            return idle
        s = self.system
        if scope == "package":
            area = CpuSet.union_all(s.package_cpus(s.cpus[c].package) for c in b.cpus)
        elif scope == "die":
            area = CpuSet.union_all(s.die_cpus(s.cpus[c].package, s.cpus[c].die) for c in b.cpus)
        elif scope == "numa":
            area = CpuSet.union_all(s.nodes[n].cpus for n in s.nodes_of(b.cpus))
        else:  # core, and l2cache approximated by the core
            area = CpuSet.union_all(s.core_of(c) for c in b.cpus)
        return idle & area

    def desired(self, b: Balloon, idle: CpuSet) -> tuple[CpuSet | None, CpuSet | None]:
        if not b.cpus:
            # An over-committed balloon with no CPUs at all: leave the container unpinned
            # rather than hand the runtime an empty cpuset.
            return None, None
        cpus = b.cpus | self.idle_shared(b, idle)
        pin_memory = self.spec.pin_memory if b.type.pin_memory is None else b.type.pin_memory
        mems = self.system.closest_memory(b.cpus) if pin_memory and b.cpus else None
        return (cpus if self.spec.pin_cpu else None), mems

    def refresh(self, skip: str | None = None) -> list[Update]:
        idle = self.free()
        wanted = {b.name: self.desired(b, idle) for b in self.balloons}
        updates: list[Update] = []
        for m in sorted(self.members, key=lambda m: m.container_id):
            if m.container_id == skip:
                continue
            cpus, mems = wanted.get(m.pool, (None, None))
            # A tuple compares by identity first: the common case costs no __eq__ call.
            if (cpus, mems) == (m.cpus, m.mems):
                continue  # the common case, without a call per member
            followed = follow(m, cpus, mems)
            if followed is not None:
                self.members.put(followed.applied)
                updates.append(followed.update)
        return updates
