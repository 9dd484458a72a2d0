"""Balloon types as DRA devices (``balloonTypes[].dra``): a claim takes a balloon of its own.

Devices: for every type with ``dra.publish``, one shared (consumable-capacity) device per
NUMA node (``dra.groupBy: numanode``, the default) or socket holding CPUs the node offers
(allowed minus reserved), named ``<type>-numa<N>`` / ``<type>-socket<N>`` (the type's name
as a DNS label; a name that is not one gets a hash of itself so that names stay distinct
and stable). Its capacity ``cpu`` is what the scheduler may hand out there: the CPUs the
claims allocated from it hold now, plus the CPUs a new balloon of the type could get there
now (the free CPUs of the NUMA node or socket, at most the type's maxCPUs, none once
maxBalloons balloons of the type exist). The scheduler subtracts what allocated claims
consume, so the CPUs already held by this device's claims are counted back in. A device
that offers nothing and holds no claim is not published. A claim consumes at least the
type's minCPUs (the device's request policy: the scheduler rounds a smaller request up).

A claim: Prepare picks ``count`` CPUs of the device's scope by the type's own placement
rules (``Balloons.options``: allocator priority, topology balancing, preferCloseToDevices,
isolated CPUs, loads) and makes a balloon of exactly those CPUs (``Balloon.claim``); its
CPU class follows from the type like any balloon's. The balloon never inflates or deflates
and is not filled by the fill chain; native balloons cannot grow into it (its CPUs are not
free). Unprepare removes it and the CPUs are free again.

Binding: a container runs in the claim's balloon only when ``model.claim_refusal`` finds it
the claim's (the same unforgeable proof as topology-aware's); a container naming a claim it
is not proven to hold is logged once and placed as if it named none.

Known limits (of the model, not of this code): two types, or a type and native balloons,
offer the same free CPUs; the scheduler does not know that, so a claim allocated from one
may find them gone at Prepare, which then fails naming the shortfall (kubelet retries, and
the republished slice no longer offers them). maxBalloons is checked at Prepare: capacity
cannot say "at most N claims".
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Sequence

import attrs

from nri_resmgr.config.models import BalloonType
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.balloons import cputree
from nri_resmgr.policies.balloons.balloon import Balloon
from nri_resmgr.policies.balloons.state import Balloons
from nri_resmgr.policies.cpu_devices import STANDARD_NUMA
from nri_resmgr.resmgr.model import (
    GROUP_CAPACITY,
    AttributeValue,
    ClaimGrant,
    Container,
    Device,
    Pod,
    claim_refusal,
)
from nri_resmgr.resmgr.policy import ClaimError

log = logging.getLogger(__name__)

_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_NAME_ROOM = 40
"""Characters of the type's name kept in a device name (a DNS label is at most 63)."""


def device_name(type_name: str, by: str, gid: int) -> str:
    """``<type>-numa<N>`` or ``<type>-socket<N>``; a type name that is not already a short
    DNS label is lowercased, cut and given 8 hex digits of its hash (distinct, stable)."""
    where = f"numa{gid}" if by == "numanode" else f"socket{gid}"
    if len(type_name) <= _NAME_ROOM and _LABEL.fullmatch(type_name):
        return f"{type_name}-{where}"
    base = re.sub(r"[^a-z0-9]+", "-", type_name.lower()).strip("-")[:_NAME_ROOM].strip("-")
    digest = hashlib.sha256(type_name.encode()).hexdigest()[:8]
    return f"{base}-{digest}-{where}" if base else f"t{digest}-{where}"


@attrs.frozen
class Scope:
    """Where a published type's balloon for a claim may sit: one device."""

    type: BalloonType
    by: str
    gid: int
    cpus: CpuSet
    """The CPUs of the NUMA node or socket the node offers (allowed minus reserved)."""

    @property
    def name(self) -> str:
        return device_name(self.type.name, self.by, self.gid)


def scopes(state: Balloons) -> dict[str, Scope]:
    """Device name -> its scope, for every type that publishes, in type and group order."""
    offered = state.allowed - state.reserved
    out: dict[str, Scope] = {}
    for t in state.types:
        if t.dra is None or not t.dra.publish:
            continue
        by = t.dra.group_by or "numanode"
        groups: dict[int, list[int]] = {}
        for cpu in sorted(offered):
            info = state.system.cpus.get(cpu)
            if info is not None:
                groups.setdefault(info.node if by == "numanode" else info.package, []).append(cpu)
        for gid, cpus in sorted(groups.items()):
            scope = Scope(t, by, gid, CpuSet(cpus))
            out[scope.name] = scope
    return out


def publishing(state: Balloons) -> bool:
    return any(t.dra is not None and t.dra.publish for t in state.types)


class ClaimBalloons:
    """The prepared claims of one policy instance; survives the state rebuilds of Synchronize
    and reconfigure (``install`` puts their balloons in each new state first)."""

    def __init__(self) -> None:
        self.grants: dict[str, ClaimGrant] = {}
        self.device_of: dict[str, str] = {}
        """Claim UID -> the device it was allocated from."""
        self._refused: set[tuple[str, str]] = set()
        self._layout: tuple[Balloons, dict[str, Scope], dict[str, Device]] | None = None
        """The scopes and their devices (capacity aside) for one state, whose machine,
        configuration and offered CPUs do not change: devices are asked for after every
        decision, and building them walks every CPU (100 ms at 4,096 CPUs)."""

    def layout(self, state: Balloons) -> tuple[dict[str, Scope], dict[str, Device]]:
        if self._layout is None or self._layout[0] is not state:
            smt = any(len(c.threads) > 1 for c in state.system.cpus.values())
            known = scopes(state)
            devices = {name: _device(state, scope, smt) for name, scope in known.items()}
            self._layout = (state, known, devices)
        return self._layout[1], self._layout[2]

    # -- devices ----------------------------------------------------------------------------

    def devices(self, state: Balloons) -> list[Device]:
        free = state.free()
        known, devices = self.layout(state)
        out = []
        for name, scope in known.items():
            t = scope.type
            held = sum(len(g.cpus) for u, g in self.grants.items() if self.device_of[u] == name)
            new = len(free & scope.cpus)
            if t.max_cpus > 0:
                new = min(new, t.max_cpus)
            if t.max_balloons > 0 and state.instances_of(t) >= t.max_balloons:
                new = 0
            if new < max(1, t.min_cpus):
                new = 0  # a balloon of the type needs minCPUs
            if held + new:
                out.append(attrs.evolve(devices[name], capacity={GROUP_CAPACITY: held + new}))
        return out

    # -- claims -----------------------------------------------------------------------------

    def scope_of(self, state: Balloons, claim: ClaimGrant) -> Scope:
        """The one device ``claim`` was allocated from; ClaimError if it names none or more."""
        known, _ = self.layout(state)
        if len(claim.devices) != 1:
            raise ClaimError(
                f"claim {claim.uid}: a balloon claim is allocated from exactly one device, "
                f"this one names {len(claim.devices)} ({', '.join(claim.devices) or 'none'})"
            )
        [name] = claim.devices
        scope = known.get(name)
        if scope is None:
            raise ClaimError(
                f"claim {claim.uid}: device {name} is no balloon type's device here "
                f"(published: {', '.join(known) or 'none'})"
            )
        return scope

    def pick(
        self, state: Balloons, asks: Sequence[tuple[CpuSet, int]], claim: ClaimGrant
    ) -> CpuSet:
        """``count`` CPUs for ``claim``'s new balloon, by its type's placement rules, inside
        its device's NUMA node or socket. Changes nothing."""
        scope = self.scope_of(state, claim)
        if len(asks) != 1:
            raise ClaimError(f"claim {claim.uid}: a balloon claim asks one device, not {len(asks)}")
        [(_, count)] = asks
        self._check_size(scope, claim.uid, count)
        self._check_room(state, scope, claim.uid)
        free = state.free() & scope.cpus
        picked = cputree.grow(state.system, CpuSet(), free, count, state.options(scope.type))
        if picked is None:
            raise ClaimError(
                f"claim {claim.uid}: {count} CPUs asked of {scope.name}, which has "
                f"{len(free)} free now (cpus {free})"
            )
        return picked

    def check(self, state: Balloons, claim: ClaimGrant) -> Scope:
        """Raise ClaimError naming why ``claim``'s CPUs cannot become its balloon."""
        scope = self.scope_of(state, claim)
        uid, cpus = claim.uid, claim.cpus
        self._check_size(scope, uid, len(cpus))
        if not cpus.issubset(scope.cpus):
            raise ClaimError(
                f"claim {uid}: cpus {cpus - scope.cpus} are outside device {scope.name} "
                f"(cpus {scope.cpus})"
            )
        # An empty native balloon gives CPUs up (a restore meets the minBalloons ones a
        # fresh start placed anywhere); one with members, or a claim's, does not.
        for b in state.balloons:
            overlap = b.cpus & cpus
            if overlap and (b.claim or b.members):
                owner = f"claim {b.claim}" if b.claim else f"balloon {b.name}"
                raise ClaimError(f"claim {uid}: cpus {overlap} are held by {owner}")
        self._check_room(state, scope, uid)
        return scope

    def _check_size(self, scope: Scope, uid: str, count: int) -> None:
        t = scope.type
        if count < max(1, t.min_cpus) or (t.max_cpus > 0 and count > t.max_cpus):
            bounds = f"minCPUs {t.min_cpus}" + (f", maxCPUs {t.max_cpus}" if t.max_cpus else "")
            raise ClaimError(
                f"claim {uid}: {count} CPUs do not make a balloon of type {t.name!r} ({bounds})"
            )

    def _check_room(self, state: Balloons, scope: Scope, uid: str) -> None:
        t = scope.type
        if t.max_balloons > 0 and state.instances_of(t) >= t.max_balloons:
            raise ClaimError(
                f"claim {uid}: type {t.name!r} has its maxBalloons {t.max_balloons} balloons"
            )

    def add(self, state: Balloons, claim: ClaimGrant, scope: Scope) -> Balloon:
        """The claim's balloon, made of its CPUs (taken from empty native balloons that held
        any: those are refitted by the caller)."""
        self.grants[claim.uid] = claim
        self.device_of[claim.uid] = scope.name
        for b in state.balloons:
            if b.cpus & claim.cpus:
                _give_up(b, claim.cpus)
        return _create(state, scope.type, claim)

    def remove(self, state: Balloons, uid: str) -> Balloon | None:
        self.grants.pop(uid, None)
        self.device_of.pop(uid, None)
        b = balloon_of(state, uid)
        if b is not None:
            state.balloons.remove(b)
        return b

    def install(self, state: Balloons) -> None:
        """Put every claim's balloon in a new (empty) ``state``, of the type as it is
        configured there. ConfigError-worthy problems raise ClaimError naming the claim."""
        for uid, grant in sorted(self.grants.items()):
            scope = self.check(state, attrs.evolve(grant, devices=(self.device_of[uid],)))
            _create(state, scope.type, grant)

    # -- containers -------------------------------------------------------------------------

    def binding(self, pod: Pod, name: str, container: Container) -> str | None:
        """The prepared claim ``container`` is proven to hold (the first, by UID); None when
        none (forged or stale claim variables are logged once and ignored)."""
        bound = None
        for uid in sorted(container.claims):
            grant = self.grants.get(uid)
            why = (
                "it is not prepared here" if grant is None else claim_refusal(pod, container, grant)
            )
            if why is None and bound is None:
                bound = uid
                continue
            if why is None:
                why = f"it already runs in the balloon of claim {bound}"
            if (container.id, uid) not in self._refused:
                self._refused.add((container.id, uid))
                log.warning("%s: names DRA claim %s, but %s; ignored", name, uid, why)
        return bound

    def forget(self, container_id: str) -> None:
        self._refused = {r for r in self._refused if r[0] != container_id}


def balloon_of(state: Balloons, uid: str) -> Balloon | None:
    return next((b for b in state.balloons if b.claim == uid), None)


def _give_up(b: Balloon, cpus: CpuSet) -> None:
    """``b`` (an empty native balloon) without ``cpus``, its components' too."""
    for part in b.components:
        _give_up(part, cpus)
    b.cpus = b.cpus - cpus


def _create(state: Balloons, t: BalloonType, claim: ClaimGrant) -> Balloon:
    used = {b.index for b in state.balloons if b.type.name == t.name}
    index = next(i for i in range(len(used) + 1) if i not in used)
    b = Balloon(t, index, claim.cpus, claim=claim.uid)
    state.balloons.append(b)
    return b


def _device(state: Balloons, scope: Scope, smt: bool) -> Device:
    """``scope``'s device, its capacity still to be set."""
    t, system = scope.type, state.system
    attributes: dict[str, AttributeValue] = {
        "balloonType": t.name,
        "cpuClass": t.cpu_class,
        # The balloon would sit on isolated CPUs: the type prefers them and the scope has some.
        "isolated": bool(t.prefer_isol_cpus and state.isolated & scope.cpus),
        "hideHyperthreads": bool(t.hide_hyperthreads),
        "numCPUs": len(scope.cpus),
        "smtEnabled": smt,
    }
    if scope.by == "numanode":
        package = system.cpus[min(scope.cpus)].package
        attributes |= {"numaNode": scope.gid, STANDARD_NUMA: scope.gid, "socketID": package}
    else:
        attributes["socketID"] = scope.gid
    return Device(
        scope.name, attributes, {GROUP_CAPACITY: 0}, tuple(scope.cpus), shared=True,
        min_request=max(1, t.min_cpus),
    )  # fmt: skip


__all__ = ["ClaimBalloons", "Scope", "balloon_of", "device_name", "publishing", "scopes"]
