"""Balloon instances: creation, inflation and deflation, their members, and the cpusets that
follow from them (the fill chain that picks a balloon for a container is ``fill``)."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence

import attrs

from nri_resmgr.config.models import BalloonsSpec, BalloonType
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.allocations import Allocation, follow
from nri_resmgr.policies.balloons import composite, cputree
from nri_resmgr.policies.balloons.balloon import Balloon
from nri_resmgr.policies.balloons.members import Members, Wanted
from nri_resmgr.resmgr.model import Update
from nri_resmgr.sysfs import MemoryType, System

log = logging.getLogger(__name__)


def target_cpus(t: BalloonType, requested: int, has_members: bool) -> int:
    """ceil(max(1, requested)/1000) clamped to [minCPUs, maxCPUs]; minCPUs when empty."""
    wanted = math.ceil(max(1, requested) / 1000) if has_members else 0
    wanted = max(wanted, t.min_cpus)
    return min(wanted, t.max_cpus) if t.max_cpus > 0 else wanted


class Balloons:
    def __init__(
        self,
        system: System,
        spec: BalloonsSpec,
        allowed: CpuSet,
        reserved: CpuSet,
        devices: Mapping[str, CpuSet] | None = None,
        types: Sequence[BalloonType] = (),
        l2: Mapping[int, CpuSet] | None = None,
    ) -> None:
        self.system = system
        self.spec = spec
        self.allowed = allowed
        self.reserved = reserved
        self.isolated = system.isolated & allowed
        self.types = tuple(types)
        self.l2 = dict(l2 or {})
        self._paths: dict[bool, dict[int, tuple[str, ...]]] = {}
        """CPU -> the CPUs sharing its L2 cache."""
        self.devices = dict(devices or {})
        """preferCloseToDevices path -> the CPUs close to it (unreadable ones left out)."""
        self.balloons: list[Balloon] = []
        self.members = Members()
        self.no_ht: set[str] = set()
        """Containers that run on one hyperthread per core (hideHyperthreads)."""
        self.keep_mems: set[str] = set()
        """Containers whose memory pinning is preserved (memory.preserve)."""
        self.mem_types: dict[str, MemoryType] = {}
        """Containers with a memory-type annotation: it overrides their type's memoryTypes."""

    # -- CPUs -----------------------------------------------------------------------------

    def free(self) -> CpuSet:
        # The reserved balloon always exists and starts as the reserved CPUs (restore keeps
        # other balloons off them), so reserved CPUs are never free for another balloon.
        return self.allowed - CpuSet.union_all(b.cpus for b in self.balloons)

    def options(self, t: BalloonType) -> cputree.Options:
        """How CPUs are chosen for balloons of ``t``: the type's allocator settings over the
        policy's, and the CPUs it prefers (its devices, reserved or isolated CPUs)."""
        spec = self.spec
        balancing = t.allocator_topology_balancing
        spread = t.prefer_spread_on_physical_cores
        close = self._close_to(t)
        names = {name for name, _ in close}
        # What some type prefers, the others avoid (when they can).
        far = [
            (name, self.allowed - cpus)
            for name, cpus in self._preferred_by_any()
            if name not in names
        ]
        spread = spec.prefer_spread_on_physical_cores if spread is None else spread
        if spread not in self._paths:
            plain = cputree.Options(spread=spread, l2=self.l2)
            self._paths[spread] = cputree.tree_paths(self.system, plain)
        return cputree.Options(
            balancing=spec.allocator_topology_balancing if balancing is None else balancing,
            spread=spread,
            close_to=tuple((cpus,) for _, cpus in close + far),
            loads=self._loads(t),
            l2=self.l2,
            paths=self._paths[spread],
        )

    def _loads(self, t: BalloonType) -> tuple[cputree.Load, ...]:
        """The loaded cores / L2 caches ``t``'s balloons avoid: the domains of the CPUs of
        every balloon that puts the same kind of load (its own ones included)."""
        classes = {lc.name: lc for lc in self.spec.load_classes}
        out: dict[str, cputree.Load] = {}
        for name in t.loads:
            lc = classes.get(name)
            if lc is None or lc.level in out:
                continue
            levels = [
                b.cpus
                for b in self.balloons
                if any(classes[n].level == lc.level for n in b.type.loads if n in classes)
            ]
            dynamic = any(
                classes[n].overloads_level_in_balloon
                for n in t.loads
                if n in classes and classes[n].level == lc.level
            )
            opts = cputree.Options(l2=self.l2)
            cpus = cputree.domain(self.system, opts, lc.level, CpuSet.union_all(levels))
            out[lc.level] = cputree.Load(lc.level, cpus, dynamic)
        return tuple(out.values())

    def _close_to(self, t: BalloonType) -> list[tuple[str, CpuSet]]:
        close = []
        if t.name == "reserved" and self.reserved:
            close.append(("reserved CPUs", self.reserved))
        close += [(d, self.devices[d]) for d in t.prefer_close_to_devices if d in self.devices]
        if t.prefer_isol_cpus and self.isolated:
            close.append(("isolated CPUs", self.isolated))
        return close

    def _preferred_by_any(self) -> list[tuple[str, CpuSet]]:
        """Isolated CPUs first, then every preferred device in the order types name them."""
        out = [("isolated CPUs", self.isolated)] if self.isolated else []
        for t in self.types:
            for entry in self._close_to(t):
                if entry[0] not in {name for name, _ in out}:
                    out.append(entry)
        return out

    def _pick(self, t: BalloonType, near: CpuSet, count: int) -> CpuSet | None:
        return cputree.grow(self.system, near, self.free(), count, self.options(t))

    def resize(self, b: Balloon, count: int) -> bool:
        """Grow or shrink ``b`` to ``count`` CPUs; False if there are not enough free CPUs."""
        if b.components:
            return composite.resize(self.resize, b, count)
        have = len(b.cpus)
        if count > have:
            extra = self._pick(b.type, b.cpus, count - have)
            if extra is None:
                return False
            b.cpus = b.cpus | extra
        elif count < have:
            # The reserved balloon gives back other CPUs before the reserved ones.
            last = self.reserved if b.type.name == "reserved" else CpuSet()
            opts = self.options(b.type)
            for giveable in (b.cpus - last, b.cpus & last):
                n = min(len(b.cpus) - count, len(giveable))
                b.cpus = b.cpus - cputree.shrink(self.system, giveable, self.free(), n, opts)
        return True

    def _target(self, b: Balloon) -> int:
        target = target_cpus(b.type, b.requested, bool(b.members))
        if b.type.name == "reserved" and b.type.min_cpus == 0:
            # Without minCPUs the reserved balloon is the reserved CPUs (at least).
            target = max(target, len(self.reserved))
        return target

    def fit(self, b: Balloon) -> None:
        if b.claim:
            return  # exactly the claim's CPUs, whatever its members ask
        target = self._target(b)
        if not self.resize(b, target):
            # Grow as far as the free CPUs go rather than not at all.
            self.resize(b, len(b.cpus) + len(self.free()))
            log.warning("%s: wanted %d CPUs, got %d", b.name, target, len(b.cpus))

    # -- instances ------------------------------------------------------------------------

    def of_type(self, t: BalloonType) -> list[Balloon]:
        """The native (annotation- and rule-selected) balloons of ``t``: a claim's balloon
        is never filled, counted towards minBalloons, nor removed by the fill chain."""
        return [b for b in self.balloons if b.type.name == t.name and not b.claim]

    def instances_of(self, t: BalloonType) -> int:
        """Every balloon of ``t``, claims' included: what maxBalloons bounds."""
        return sum(1 for b in self.balloons if b.type.name == t.name)

    def by_name(self, name: str) -> Balloon | None:
        return next((b for b in self.balloons if b.name == name), None)

    def create(self, t: BalloonType, cpus: CpuSet | None = None, count: int = 0) -> Balloon | None:
        used = {b.index for b in self.balloons if b.type.name == t.name}
        index = next(i for i in range(len(used) + 1) if i not in used)
        if cpus is None and t.components:
            parts = composite.components(self.types, self.balloons, t)
            if parts is None:
                return None
            b = Balloon(t, index, CpuSet(), components=parts)
            self.balloons.append(b)
            if count and not self.resize(b, count):
                self.balloons.remove(b)
                return None
            return b
        if cpus is None:
            picked = self._pick(t, CpuSet(), count) if count else CpuSet()
            if picked is None:
                return None
            cpus = picked
        b = Balloon(t, index, cpus)
        self.balloons.append(b)
        return b

    def remove_if_surplus(self, b: Balloon) -> None:
        if b.members or b.claim:
            return
        if len(self.of_type(b.type)) > b.type.min_balloons:
            self.balloons.remove(b)
        else:
            self.resize(b, b.type.min_cpus)

    # -- members --------------------------------------------------------------------------

    def join(
        self,
        b: Balloon,
        a: Allocation,
        namespace: str,
        fit: bool = True,
        group: str | None = None,
    ) -> None:
        b.members[a.container_id] = a.request
        b.pods[a.container_id] = a.pod_id
        b.namespaces[a.container_id] = namespace
        if group is not None:
            b.groups[a.container_id] = group
        self.members.put(attrs.evolve(a, pool=b.name))
        if fit:
            self.fit(b)

    def leave(self, cid: str) -> Balloon | None:
        member = self.members.pop(cid)
        self.no_ht.discard(cid)
        self.keep_mems.discard(cid)
        self.mem_types.pop(cid, None)
        b = self.by_name(member.pool) if member else None
        if b is None:
            return None
        for d in (b.members, b.pods, b.namespaces, b.groups):
            d.pop(cid, None)
        if b.members:
            self.fit(b)
        else:
            self.remove_if_surplus(b)
        self._grow_short_balloons()
        return b

    def _grow_short_balloons(self) -> None:
        """Balloons that got fewer CPUs than they want when CPUs were short take the ones
        a leaving container freed (a restart, fitting every balloon, would do it anyway)."""
        for b in self.balloons:
            if not self.free():
                return
            if not b.claim and len(b.cpus) < self._target(b):
                self.fit(b)

    def hold(self, cid: str, cpus: CpuSet | None, mems: CpuSet | None) -> None:
        """Record that member ``cid`` runs with ``cpus`` and ``mems`` (None: unknown, so the
        next refresh sends its balloon's sets again)."""
        a = self.members.get(cid)
        if a is not None:
            self.members.put(attrs.evolve(a, cpus=cpus, mems=mems))

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
        elif scope == "l2cache":
            area = CpuSet.union_all(self.l2.get(c, s.core_of(c)) for c in b.cpus)
        else:  # core
            area = CpuSet.union_all(s.core_of(c) for c in b.cpus)
        return idle & area

    def desired(
        self, b: Balloon, idle: CpuSet, cid: str | None = None, current: CpuSet | None = None
    ) -> tuple[CpuSet | None, CpuSet | None]:
        """The cpus and mems of a member of ``b`` (``cid``: the container, for its own
        hideHyperthreads and memory.preserve; ``current``: its mems now)."""
        if not b.cpus:
            # An over-committed balloon with no CPUs at all: leave the container unpinned
            # rather than hand the runtime an empty cpuset.
            return None, None
        cpus = b.cpus | self.idle_shared(b, idle)
        if cid in self.no_ht:
            cpus = self.system.single_threads(cpus)
        pin_memory = self.spec.pin_memory if b.type.pin_memory is None else b.type.pin_memory
        mems = balloon_mems(self.system, b, self.mem_types.get(cid or "")) if pin_memory else None
        if cid in self.keep_mems and pin_memory:
            mems = current
        return (cpus if self.spec.pin_cpu else None), mems

    def refresh(self, skip: str | None = None) -> list[Update]:
        """The updates that bring every member (but ``skip``) to what its balloon wants,
        in container-id order. Only written members and balloons whose target changed are
        looked at (``members.Members``); a full walk if the two records ever disagree."""
        idle = self.free()
        members = self.members
        if sum(len(b.members) for b in self.balloons) != len(members):
            members.verified.clear()  # a member outside every balloon: trust nothing
            members.dirty.update(a.container_id for a in members)
        updates: list[Update] = []
        verified: dict[str, Wanted] = {}
        to_check = members.dirty | self.no_ht | self.keep_mems | set(self.mem_types)
        for b in self.balloons:
            common = self.desired(b, idle)
            verified[b.name] = common
            if members.verified.get(b.name) == common:
                ids = [c for c in to_check if c in b.members]
            else:
                ids = list(b.members)
            for cid in ids:
                m = members.get(cid)
                if m is None or cid == skip:
                    continue
                own = self._own_target(cid)
                cpus, mems = self.desired(b, idle, cid, m.mems) if own else common
                followed = None if (cpus, mems) == (m.cpus, m.mems) else follow(m, cpus, mems)
                if followed is not None:
                    members.store_checked(followed.applied)
                    updates.append(followed.update)
                else:
                    members.dirty.discard(cid)
        members.verified = verified
        return sorted(updates, key=lambda u: u.container_id)

    def _own_target(self, cid: str) -> bool:
        """Whether ``cid`` has settings of its own (hideHyperthreads, memory.preserve,
        a memory-type annotation)."""
        return cid in self.no_ht or cid in self.keep_mems or cid in self.mem_types


def balloon_mems(system: System, b: Balloon, types: MemoryType | None = None) -> CpuSet:
    """A balloon's memory nodes: those closest to its CPUs, of ``types`` (a container's
    memory-type annotation) or else of its type's memoryTypes."""
    if types is None and b.type.memory_types:
        types = MemoryType.parse(",".join(b.type.memory_types))
    return system.memory_of_types(b.cpus, types or MemoryType(0))
