"""DRA claims in topology-aware: claimed CPUs leave the shared pools, claim containers get them.

How a claim is held, without the engine knowing about DRA: each prepared claim is one entry
in the engine's allocation cache, keyed ``dra-claim:<uid>``, of kind PRESERVE (no load, no
cpuset of its own: ``refresh`` never sends it an update) whose ``exclusive`` set is the
claimed CPUs. Every pool's shared set is its sharable CPUs minus the cache's exclusive union,
so the claim's CPUs leave every shared pool and are never picked for a native exclusive
grant, exactly as if a container held them. Its pool name matches no pool, so gauges and
zones do not count it.

A container bound to a claim (its env carries the claim's variable, the claim is prepared
here and the value is the prepared cpuset: anything else is forged or stale and ignored) is
stored as an EXCLUSIVE allocation of the claimed CPUs with no mCPU load, in the tightest pool
holding them (for its memory nodes). Several containers naming the same claim all run on its
CPUs (a claim shared by containers of the pod, as the API allows).

Invariants: a CPU belongs to at most one claim; claimed CPUs are allocatable (allowed minus
reserved) and were not exclusively held by a native container when claimed.
"""

from __future__ import annotations

import logging

import attrs

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.allocations import Allocation, Kind
from nri_resmgr.policies.topology_aware.engine import Engine
from nri_resmgr.resmgr.model import Container, Pod
from nri_resmgr.resmgr.policy import ClaimError

log = logging.getLogger(__name__)

CLAIM_ENTRY_PREFIX = "dra-claim:"
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
    rebuilds (reconfigure) and re-enters each new engine's cache through ``install``."""

    def __init__(self) -> None:
        self.claims: dict[str, CpuSet] = {}
        self.bound: dict[str, tuple[str, ...]] = {}
        """Container id -> the claims it is bound to (its allocation holds their CPUs)."""

    def all_cpus(self) -> CpuSet:
        return CpuSet.union_all(self.claims.values())

    # -- claiming ---------------------------------------------------------------------------

    def check(self, engine: Engine, uid: str, cpus: CpuSet) -> None:
        """Raise ClaimError naming why ``cpus`` cannot go to claim ``uid``."""
        if not cpus:
            raise ClaimError(f"claim {uid}: no CPUs to claim")
        held = self.claims.get(uid)
        if held is not None and held != cpus:
            raise ClaimError(f"claim {uid} is already prepared with cpus {held}, not {cpus}")
        offered = engine.allowed - engine.reserved
        if not cpus.issubset(offered):
            raise ClaimError(
                f"claim {uid}: cpus {cpus - offered} are not offered as devices "
                f"(reserved or not allowed; offered: {offered})"
            )
        for other, other_cpus in self.claims.items():
            if other != uid and not cpus.isdisjoint(other_cpus):
                raise ClaimError(
                    f"claim {uid}: cpus {cpus & other_cpus} are already claimed by claim {other}"
                )
        for a in engine.cache:
            if not is_claim_entry(a) and a.exclusive and not cpus.isdisjoint(a.exclusive):
                if self.bound.get(a.container_id) == (uid,) or (
                    a.container is not None and _same_cpuset(a.container.claims.get(uid, ""), cpus)
                ):
                    # A container of this very claim: re-claimed after a restart whose
                    # Synchronize placed it before the claim was back.
                    continue
                raise ClaimError(
                    f"claim {uid}: cpus {cpus & a.exclusive} are held exclusively by "
                    f"container {a.name}"
                )
        self._check_pools_keep_a_cpu(engine, uid, cpus)

    def _check_pools_keep_a_cpu(self, engine: Engine, uid: str, cpus: CpuSet) -> None:
        taken = engine.cache.exclusive_cpus() | cpus
        for pool in engine.pools:
            users = [
                a for a in engine.cache.in_pool(pool.name) if a.kind in (Kind.SHARED, Kind.MIXED)
            ]
            if users and engine.sharable[pool.index] and not engine.shared_cpus(pool.index, taken):
                raise ClaimError(
                    f"claim {uid}: cpus {cpus} would leave pool {pool.name} without a shared "
                    f"CPU for its {len(users)} shared containers"
                )

    def add(self, engine: Engine, uid: str, cpus: CpuSet) -> None:
        self.claims[uid] = cpus
        engine.cache.put(_entry(uid, cpus))

    def remove(self, engine: Engine, uid: str) -> CpuSet | None:
        cpus = self.claims.pop(uid, None)
        engine.cache.pop(entry_id(uid))
        return cpus

    def install(self, engine: Engine) -> None:
        """Put every claim's entry into ``engine``'s cache (a new or cleared one)."""
        for uid, cpus in self.claims.items():
            engine.cache.put(_entry(uid, cpus))

    # -- containers -------------------------------------------------------------------------

    def binding(self, name: str, container: Container) -> Binding | None:
        """The prepared claims ``container`` names with their true cpusets; None when it
        names none (forged or stale claim variables are logged and ignored)."""
        uids: list[str] = []
        cpus = CpuSet()
        for uid, value in sorted(container.claims.items()):
            held = self.claims.get(uid)
            if held is None:
                log.warning(
                    "%s: names DRA claim %s, which is not prepared here; ignored", name, uid
                )
            elif _same_cpuset(value, held):
                uids.append(uid)
                cpus = cpus | held
            else:
                log.warning(
                    "%s: claim %s variable says cpus %r, the claim holds %s; ignored",
                    name,
                    uid,
                    value,
                    held,
                )
        return Binding(tuple(uids), cpus) if uids else None

    def bound_to(self, uid: str) -> list[str]:
        return sorted(cid for cid, uids in self.bound.items() if uid in uids)

    def unbind(self, container_id: str) -> None:
        self.bound.pop(container_id, None)

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
        engine.cache.put(a)
        return a


def tightest_pool(engine: Engine, cpus: CpuSet) -> str:
    holding = [p for p in engine.pools if cpus.issubset(p.cpus)]
    return max(holding, key=lambda p: (p.depth, -p.index)).name if holding else engine.pools[0].name


def _entry(uid: str, cpus: CpuSet) -> Allocation:
    return Allocation(
        entry_id(uid), "", f"DRA claim {uid}", _NO_POOL, Kind.PRESERVE, 0, exclusive=cpus
    )


def _same_cpuset(text: str, cpus: CpuSet) -> bool:
    try:
        return CpuSet.parse(text) == cpus
    except ValueError:
        return False
