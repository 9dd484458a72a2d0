"""DRA claims in topology-aware: claimed CPUs leave the shared pools, claim containers get them.

How a claim is held, without the engine knowing about DRA: each prepared claim is one grant
the engine adopts (``Engine.adopt``), keyed ``dra-claim:<uid>``, of kind PRESERVE (no load, no
cpuset of its own: ``refresh`` never sends it an update) whose ``exclusive`` set is the
claimed CPUs. Every pool's shared set is its sharable CPUs minus the grants' exclusive union,
so the claim's CPUs leave every shared pool and are never picked for a native exclusive
grant, exactly as if a container held them. Its pool name matches no pool, so gauges and
zones do not count it.

A container bound to a claim is one the runtime says is the claim's (``model.claim_refusal``:
the claim is prepared here, the pod is in the claim's namespace, and either the runtime lists
the claim's CDI device or, where it reports no CDI devices, the env carries the claim's key
that only its CDI spec injects). Anything else is forged or stale: logged once per container
and claim, and ignored (the container is placed as if it named no claim). A bound container
is stored as an EXCLUSIVE allocation of the claimed CPUs with no mCPU load, in the tightest
pool holding them (for its memory nodes). Several containers naming the same claim all run on its
CPUs (a claim shared by containers of the pod, as the API allows).

Grouped mode (``dra.cpuDeviceMode: grouped``): the CPUs of ``dra.groupedCPUs`` are set apart
for grouped claims by one more PRESERVE entry (``dra-claim:grouped-cpus``) holding those of
them no claim holds, so no native container, exclusive or shared, ever runs on them. A
group's published capacity is its CPUs there; the scheduler never lets the claims of a
group consume more than that, and only grouped claims take CPUs there, so Prepare can always
give what an allocation consumed (``pick``). Per-CPU claims (records of the other mode) must
stay off these CPUs, grouped ones inside them.

A claim taking the last shared CPUs of a pool holding shared (or mixed) containers moves
them up to the nearest ancestor pool that still holds them (``relocations``): the scheduler
saw the CPUs offered and cannot know. They stay there when the claim is released (their
cpuset grows back with the ancestor's shared CPUs). Exclusive CPUs are never taken from a
container: a claim overlapping them is refused.

Invariants: a CPU belongs to at most one claim; claimed CPUs are allocatable (allowed minus
reserved) and were not exclusively held by a native container when claimed; the grouped CPUs
hold only grouped claims' CPUs and nothing else.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import attrs

from nri_resmgr.cpus.allocator import allocate_cpus
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.allocations import Allocation, Kind
from nri_resmgr.policies.topology_aware.engine import Engine
from nri_resmgr.resmgr.model import ClaimGrant, Container, Pod, claim_refusal
from nri_resmgr.resmgr.policy import ClaimError

log = logging.getLogger(__name__)

CLAIM_ENTRY_PREFIX = "dra-claim:"
GROUPED_ENTRY = CLAIM_ENTRY_PREFIX + "grouped-cpus"
"""The entry setting the unclaimed grouped CPUs apart (no claim UID has this shape)."""
_NO_POOL = ""
"""The claim entries' pool: no pool has it, so they count in no pool's load or exports."""


def entry_id(claim_uid: str) -> str:
    return CLAIM_ENTRY_PREFIX + claim_uid


def is_claim_entry(a: Allocation) -> bool:
    return a.container_id.startswith(CLAIM_ENTRY_PREFIX)


@attrs.frozen
class Binding:
    """The claims a container is bound to, and their CPUs."""

    uids: tuple[str, ...]
    cpus: CpuSet


class ClaimBook:
    """The prepared claims of one policy instance (claim UID -> CPUs); survives engine
    rebuilds (reconfigure) and re-enters each new or cleared engine through ``entries``,
    which ``restore`` adopts before it places any container."""

    def __init__(self) -> None:
        self.claims: dict[str, ClaimGrant] = {}
        self.bound: dict[str, tuple[str, ...]] = {}
        """Container id -> the claims it is bound to (its allocation holds their CPUs)."""
        self._refused: set[tuple[str, str]] = set()
        """(container id, claim UID) pairs already logged as refused: logged once."""
        self.grouped = CpuSet()
        """``dra.groupedCPUs``: set apart for grouped claims (empty: per-CPU mode)."""

    def all_cpus(self) -> CpuSet:
        return CpuSet.union_all(g.cpus for g in self.claims.values())

    def cpus(self) -> dict[str, CpuSet]:
        """Claim UID -> its CPUs."""
        return {uid: g.cpus for uid, g in self.claims.items()}

    # -- claiming ---------------------------------------------------------------------------

    def check(self, engine: Engine, grant: ClaimGrant) -> dict[str, str]:
        """Raise ClaimError naming why ``grant``'s CPUs cannot go to its claim; else the
        shared containers it moves up (``relocations``, for ``Engine.relocate``)."""
        uid, cpus = grant.uid, grant.cpus
        if not cpus:
            raise ClaimError(f"claim {uid}: no CPUs to claim")
        held = self.claims.get(uid)
        if held is not None and held.cpus != cpus:
            raise ClaimError(f"claim {uid} is already prepared with cpus {held.cpus}, not {cpus}")
        offered = engine.allowed - engine.reserved
        if not cpus.issubset(offered):
            raise ClaimError(
                f"claim {uid}: cpus {cpus - offered} are not offered as devices "
                f"(reserved or not allowed; offered: {offered})"
            )
        self._check_mode(grant)
        for other, other_grant in self.claims.items():
            if other != uid and not cpus.isdisjoint(other_grant.cpus):
                raise ClaimError(
                    f"claim {uid}: cpus {cpus & other_grant.cpus} are already claimed by "
                    f"claim {other}"
                )
        for a in engine.allocations():
            if not is_claim_entry(a) and a.exclusive and not cpus.isdisjoint(a.exclusive):
                if self.bound.get(a.container_id) == (uid,) or (
                    a.pod is not None
                    and a.container is not None
                    and claim_refusal(a.pod, a.container, grant) is None
                ):
                    # A container of this very claim: re-claimed after a restart whose
                    # Synchronize placed it before the claim was back.
                    continue
                raise ClaimError(
                    f"claim {uid}: cpus {cpus & a.exclusive} are held exclusively by "
                    f"container {a.name}"
                )
        return self.relocations(engine, uid, cpus)

    def _check_mode(self, grant: ClaimGrant) -> None:
        uid, cpus = grant.uid, grant.cpus
        if grant.grouped and not self.grouped:
            raise ClaimError(
                f"claim {uid} was prepared from grouped devices, but this daemon publishes "
                "per-CPU devices (dra.cpuDeviceMode changed since); unprepare it first"
            )
        if grant.grouped and not cpus.issubset(self.grouped):
            raise ClaimError(
                f"claim {uid}: cpus {cpus - self.grouped} are not in dra.groupedCPUs "
                f"{self.grouped} (changed since the claim was prepared)"
            )
        if not grant.grouped and not cpus.isdisjoint(self.grouped):
            raise ClaimError(
                f"claim {uid} was prepared from per-CPU devices; cpus {cpus & self.grouped} "
                "are now set apart for grouped claims (dra.groupedCPUs); unprepare it first"
            )

    def pick(self, engine: Engine, asks: Sequence[tuple[CpuSet, int]]) -> CpuSet:
        """CPUs for a grouped claim: ``count`` of each group's unclaimed grouped CPUs, chosen
        by the CPU allocator (idle cores first, SMT siblings together, as exclusive grants
        are). Raises ClaimError (nothing taken) when a group has fewer free."""
        taken = self.all_cpus()
        picked = CpuSet()
        for within, count in asks:
            free = (self.grouped & within) - taken - picked
            if count > len(free):
                raise ClaimError(
                    f"{count} CPUs asked of a group with {len(free)} free of "
                    f"{len(self.grouped & within)} (cpus {free} free)"
                )
            picked = picked | allocate_cpus(engine.system, free, count)
        return picked

    def set_grouped(self, engine: Engine, cpus: CpuSet) -> None:
        """Set ``cpus`` apart for grouped claims in ``engine`` (empty: per-CPU mode)."""
        self.grouped = cpus
        self._install_grouped(engine)

    def _install_grouped(self, engine: Engine) -> None:
        entry = self._grouped_entry()
        if entry is not None:
            engine.adopt([entry])
        else:
            engine.disown(GROUPED_ENTRY)

    def _grouped_entry(self) -> Allocation | None:
        """The entry setting the unclaimed grouped CPUs apart; None when there are none."""
        free = self.grouped - self.all_cpus()
        return _entry_for(GROUPED_ENTRY, "DRA grouped CPUs", free) if free else None

    def relocations(self, engine: Engine, uid: str, cpus: CpuSet) -> dict[str, str]:
        """Where the shared containers go (container id -> pool name) of the pools that
        ``cpus`` would leave without a shared CPU: the nearest ancestor still holding their
        load after the claim, else (over-committed, as the engine's last resort) the nearest
        keeping any shared CPU. ClaimError when none keeps one (the root would be emptied).

        The scheduler saw those CPUs offered and cannot know a container shares them, so
        the claim moves the containers rather than fail. Only claims do: a native exclusive
        grant never empties a pool its shared containers use (``Supply``)."""
        taken = engine.exclusive_cpus() | cpus
        supply = engine.supply
        moves: dict[str, str] = {}
        for pool in engine.pools:
            users = [a for a in engine.in_pool(pool.name) if a.kind.uses_shared]
            if not users or not supply.sharable[pool.index]:
                continue
            if supply.shared_cpus(pool.index, taken):
                continue
            target = _shelter(engine, pool.index, taken)
            if target is None:
                raise ClaimError(
                    f"claim {uid}: cpus {cpus} would leave pool {pool.name} and every pool "
                    f"above it without a shared CPU for its {len(users)} shared containers"
                )
            moves.update((a.container_id, engine.pools[target].name) for a in users)
        return moves

    def add(self, engine: Engine, grant: ClaimGrant) -> None:
        self.claims[grant.uid] = grant
        engine.adopt([_entry(grant.uid, grant.cpus)])
        self._install_grouped(engine)

    def remove(self, engine: Engine, uid: str) -> CpuSet | None:
        grant = self.claims.pop(uid, None)
        engine.disown(entry_id(uid))
        self._install_grouped(engine)
        return grant.cpus if grant is not None else None

    def entries(self) -> list[Allocation]:
        """Every claim's entry, and the grouped CPUs' while any is unclaimed: what a new or
        cleared engine must hold before it places a container (``restore``'s ``around``)."""
        out = [_entry(uid, g.cpus) for uid, g in self.claims.items()]
        grouped = self._grouped_entry()
        return out if grouped is None else [*out, grouped]

    # -- containers -------------------------------------------------------------------------

    def binding(self, pod: Pod, name: str, container: Container) -> Binding | None:
        """The prepared claims ``container`` is proven to be bound to, with their CPUs; None
        when there are none (forged or stale claim variables are logged once and ignored)."""
        uids: list[str] = []
        cpus = CpuSet()
        for uid in sorted(container.claims):
            grant = self.claims.get(uid)
            why = (
                "it is not prepared here" if grant is None else claim_refusal(pod, container, grant)
            )
            if grant is not None and why is None:
                uids.append(uid)
                cpus = cpus | grant.cpus
            elif (container.id, uid) not in self._refused:
                self._refused.add((container.id, uid))
                log.warning("%s: names DRA claim %s, but %s; ignored", name, uid, why)
        return Binding(tuple(uids), cpus) if uids else None

    def bound_to(self, uid: str) -> list[str]:
        return sorted(cid for cid, uids in self.bound.items() if uid in uids)

    def unbind(self, container_id: str) -> None:
        self.bound.pop(container_id, None)

    def forget(self, container_id: str) -> None:
        """The container is gone: unbound, and its refusals need no memory."""
        self.unbind(container_id)
        self._refused = {r for r in self._refused if r[0] != container_id}

    def bind(
        self, engine: Engine, pod: Pod, container: Container, name: str, binding: Binding
    ) -> Allocation:
        """Store ``container`` on its claims' CPUs (replacing whatever it had)."""
        self.bound[container.id] = binding.uids
        a = Allocation(
            container.id,
            pod.id,
            name,
            tightest_pool(engine, binding.cpus),
            Kind.EXCLUSIVE,
            0,  # the claim is the container's CPU; it takes nothing from a shared pool
            exclusive=binding.cpus,
            pod=pod,
            container=container,
        )
        return engine.store_placed(a)


def _shelter(engine: Engine, pool: int, taken: CpuSet) -> int | None:
    """The nearest ancestor of ``pool`` that holds its load with ``taken`` held exclusively,
    else the nearest with any shared CPU left (over-committed, logged); None if none has."""
    supply = engine.supply
    above = [a for a in supply.ancestors[pool] if supply.shared_cpus(a, taken)]
    for a in above:
        if supply.holds_its_load(a, taken):
            return a
    if above:
        log.warning("shared CPUs of %s over-committed to make room for a DRA claim",
                    engine.pools[above[0]].name)  # fmt: skip
        return above[0]
    return None


def tightest_pool(engine: Engine, cpus: CpuSet) -> str:
    holding = [p for p in engine.pools if cpus.issubset(p.cpus)]
    return max(holding, key=lambda p: (p.depth, -p.index)).name if holding else engine.pools[0].name


def _entry(uid: str, cpus: CpuSet) -> Allocation:
    return _entry_for(entry_id(uid), f"DRA claim {uid}", cpus)


def _entry_for(key: str, name: str, cpus: CpuSet) -> Allocation:
    return Allocation(key, "", name, _NO_POOL, Kind.PRESERVE, 0, exclusive=cpus)
