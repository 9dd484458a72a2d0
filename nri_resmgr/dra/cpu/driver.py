"""The CPU driver: the policy's CPUs as DRA devices, and claims prepared as claimed CPUs.

It sits under the kubelet-plugin layer (``dra.kubeletplugin``), which reads and checks the
claims and answers kubelet; this driver knows what the devices are.

Prepare, per claim: take this driver's allocation results, map their devices to CPUs (the
policy's published devices), claim the CPUs in the policy under the manager lock (they leave
the shared pools; shared containers are updated), write the claim's CDI spec, persist the
record, then answer. Any failure undoes the steps taken, in reverse, so a failed claim
leaves nothing behind; the error names the cause.

Unprepare, per claim: release the CPUs, remove the CDI spec, drop the record. A claim with no
record (never prepared here, or already unprepared) succeeds: kubelet retries unprepare and
may send claims whose Prepare failed.

Idempotency: a second Prepare of a prepared UID answers the same devices and CDI ids (the
policy claim and CDI file are re-asserted, not duplicated). At daemon start, ``restore``
re-claims every recorded claim in the policy before any NRI request is served, so Synchronize
already finds the claims' containers.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Protocol

import attrs

from nri_resmgr import quantity
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.dra.cpu.cdi import CdiError, CdiWriter, new_claim_key
from nri_resmgr.dra.cpu.state import ClaimRecord, ClaimStore, PreparedResult, StateError
from nri_resmgr.dra.kubeletplugin import (
    AllocatedClaim,
    ClaimRef,
    Device,
    PreparedDevice,
    PrepareResult,
)
from nri_resmgr.dra.kubeletplugin.devices import Capacity, MetadataValue, RequestPolicy
from nri_resmgr.errors import ResmgrError
from nri_resmgr.resmgr import model
from nri_resmgr.resmgr.policy import ClaimError, Policy
from nri_resmgr.shorten import shorten

log = logging.getLogger(__name__)

DRA_DOMAIN = "nri.io"


def driver_name_for(policy_name: str) -> str:
    """``<policy>.nri.io``: the driver is the policy's."""
    return f"{policy_name}.{DRA_DOMAIN}"


class PrepareError(ResmgrError):
    """One claim cannot be prepared; the message is the per-claim error kubelet gets."""


class CpuOwner(Protocol):
    """What the driver needs from the resource manager (``ResourceManager`` satisfies it)."""

    async def dra_devices(self) -> list[model.Device]: ...
    async def claim_cpus(self, claim: model.ClaimGrant) -> None: ...
    async def claim_picked(
        self, claim: model.ClaimGrant, asks: Sequence[tuple[CpuSet, int]]
    ) -> model.ClaimGrant: ...
    async def release_claim(self, claim_uid: str) -> None: ...


@attrs.frozen
class Allocated:
    """The part of a claim's allocation that is this driver's, mapped to CPUs: exactly
    ``cpus`` (per-CPU devices), or ``asks`` (group CPUs, count) for grouped devices."""

    results: tuple[PreparedResult, ...]
    cpus: CpuSet
    asks: tuple[tuple[CpuSet, int], ...] = ()

    @property
    def grouped(self) -> bool:
        return bool(self.asks)


WHOLE_CPUS_FROM = 1
WHOLE_CPU_STEP = 1
GROUP_REQUEST_POLICY = RequestPolicy(minimum=WHOLE_CPUS_FROM, step=WHOLE_CPU_STEP, default=1)
"""Whole CPUs: the scheduler rounds a request up to one (a fractional one up to the next
whole CPU), and a request naming no amount consumes one."""


def slice_device(device: model.Device) -> Device:
    """The policy's device as the slice publishes it (its CPUs stay here)."""
    capacity = {
        name: Capacity(v, _request_policy(device, v)) for name, v in device.capacity.items()
    }
    return Device(
        device.name, device.attributes, capacity, allow_multiple_allocations=device.shared
    )


def _request_policy(device: model.Device, value: int) -> RequestPolicy | None:
    """Whole CPUs for a grouped device, at least its ``min_request`` (also what a request
    naming no amount consumes). The API server refuses a step that cannot be taken once
    above the minimum (``min + step > capacity``, a group of one CPU): there the step goes,
    and the only amount in range is whole anyway."""
    if not device.shared:
        return None
    least = max(WHOLE_CPUS_FROM, device.min_request)
    policy = GROUP_REQUEST_POLICY
    if least != WHOLE_CPUS_FROM:
        policy = attrs.evolve(policy, minimum=least, default=least)
    if value < least + WHOLE_CPU_STEP:
        return attrs.evolve(policy, step=None)
    return policy


class CpuDriver:
    def __init__(
        self,
        manager: CpuOwner,
        driver: str,
        pool_name: str,
        store: ClaimStore,
        cdi: CdiWriter,
    ) -> None:
        self.manager = manager
        self.driver = driver
        self.pool_name = pool_name
        self.store = store
        self.cdi = cdi

    # -- start ------------------------------------------------------------------------------

    def restore(self, policy: Policy) -> None:
        """Load the records and re-claim them in ``policy`` (called before the daemon serves,
        so without the manager lock: nothing else runs yet)."""
        self.store.load()
        for record in self.store:
            record = self._with_key(record)
            try:
                policy.claim_cpus(self.grant(record))
            except ClaimError as e:
                log.error("DRA claim %s could not be restored (kept for unprepare): %s",
                          _describe(record), e)  # fmt: skip
                continue
            try:
                # Rewritten, not only when missing: the spec must carry the record's key.
                self.cdi.write(record.uid, record.cpus, record.key)
            except CdiError as e:
                log.error("DRA claim %s: %s", _describe(record), e)
        if self.store.records:
            log.info("restored %d prepared DRA claims", len(self.store.records))

    def _with_key(self, record: ClaimRecord) -> ClaimRecord:
        """A record of a version before claim keys gets one (its containers that run from
        the old spec are no longer bound: they have no key)."""
        if record.key:
            return record
        keyed = attrs.evolve(record, key=new_claim_key())
        try:
            self.store.put(keyed)
        except StateError as e:
            log.error("DRA claim %s: %s", _describe(record), e)
        log.warning(
            "DRA claim %s was prepared by a version without claim keys; its containers "
            "started before now are not bound to it",
            _describe(record),
        )
        return keyed

    def grant(self, record: ClaimRecord) -> model.ClaimGrant:
        """The claim as the policy holds it, with what proves its containers."""
        return model.ClaimGrant(
            record.uid,
            record.namespace,
            record.cpus,
            record.key,
            self.cdi.device_id(record.uid),
            grouped=record.grouped,
            devices=tuple(r.device for r in record.results),
        )

    # -- the Driver protocol ----------------------------------------------------------------

    async def devices(self) -> list[Device]:
        return [slice_device(d) for d in await self.manager.dra_devices()]

    async def prepare(self, claims: Sequence[AllocatedClaim]) -> dict[str, PrepareResult]:
        results = {}
        for claim in claims:
            try:
                devices = await self._prepare_one(claim)
            except (ResmgrError, OSError) as e:
                log.warning("DRA claim %s: %s", shorten(claim.ref.describe(), 400), e)
                results[claim.ref.uid] = PrepareResult(error=str(e))
            else:
                results[claim.ref.uid] = PrepareResult(devices)
        return results

    async def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        errors = {}
        for ref in claims:
            try:
                await self._unprepare_one(ref)
            except (ResmgrError, OSError) as e:
                log.warning("DRA claim %s: %s", shorten(ref.describe(), 400), e)
                errors[ref.uid] = str(e)
            else:
                errors[ref.uid] = ""
        return errors

    # -- one claim --------------------------------------------------------------------------

    async def _prepare_one(self, claim: AllocatedClaim) -> tuple[PreparedDevice, ...]:
        ref = claim.ref
        self._check_store()
        devices = {d.name: d for d in await self.manager.dra_devices()}
        allocated = self._allocated(claim, devices)
        record = self.store.get(ref.uid)
        if record is not None:
            _check_same_allocation(ref, record, allocated)
        new = record is None
        if record is None:
            record = ClaimRecord(
                ref.uid, ref.namespace, ref.name, allocated.cpus, allocated.results,
                new_claim_key(), grouped=allocated.grouped,
            )  # fmt: skip
        try:
            if new and allocated.grouped:
                grant = await self.manager.claim_picked(self.grant(record), allocated.asks)
                record = attrs.evolve(record, cpus=grant.cpus)
            else:
                await self.manager.claim_cpus(self.grant(record))
        except ClaimError as e:
            raise PrepareError(f"claim {ref.describe()}: {e}") from e
        if new:
            await self._persist(record)
        elif not self.cdi.exists(ref.uid):
            self.cdi.write(ref.uid, record.cpus, record.key)
        return self._answer(record, claim, devices)

    async def _persist(self, record: ClaimRecord) -> None:
        """CDI spec, then the record; on failure neither is left and the CPUs go back."""
        ref = ClaimRef(record.uid, record.namespace, record.name)
        try:
            self.cdi.write(ref.uid, record.cpus, record.key)
        except CdiError:
            await self.manager.release_claim(ref.uid)
            raise
        try:
            self.store.put(record)
        except StateError:
            try:
                self.cdi.remove(ref.uid)
            finally:
                await self.manager.release_claim(ref.uid)
            raise
        log.info("DRA claim %s prepared: cpus %s", ref.describe(), record.cpus)

    async def _unprepare_one(self, ref: ClaimRef) -> None:
        self._check_store()
        record = self.store.get(ref.uid)
        if record is None:
            # Never prepared here (or already unprepared): success, and no stray spec left.
            self.cdi.remove(ref.uid)
            return
        await self.manager.release_claim(ref.uid)
        self.cdi.remove(ref.uid)
        self.store.remove(ref.uid)
        log.info("DRA claim %s unprepared: cpus %s released", ref.describe(), record.cpus)

    def _check_store(self) -> None:
        if self.store.broken:
            raise StateError(self.store.broken)

    def _allocated(self, claim: AllocatedClaim, devices: Mapping[str, model.Device]) -> Allocated:
        ref = claim.ref
        if not claim.results:
            raise PrepareError(
                f"claim {ref.describe()} has no allocation result for driver {self.driver} "
                f"(its results are for {', '.join(claim.other_drivers) or 'no driver'})"
            )
        prepared: list[PreparedResult] = []
        cpus = CpuSet()
        asks: list[tuple[CpuSet, int]] = []
        unknown: list[str] = []
        for r in claim.results:
            if r.pool != self.pool_name:
                raise PrepareError(
                    f"claim {ref.describe()}: device {r.pool}/{r.device} is from pool {r.pool}, "
                    f"not this node's pool {self.pool_name} (allocated for another node)"
                )
            if r.admin_access:
                raise PrepareError(
                    f"claim {ref.describe()}: device {r.device} is allocated with adminAccess, "
                    "which CPU devices do not support (the CPUs may belong to another claim)"
                )
            known = devices.get(r.device)
            if known is None or not known.cpus:
                unknown.append(r.device)
                continue
            if known.shared:
                count = self._consumed(ref, r.device, r.consumed_capacity, len(known.cpus))
                asks.append((CpuSet(known.cpus), count))
            else:
                cpus = cpus | CpuSet(known.cpus)
            prepared.append(PreparedResult(r.request, r.device))
        if unknown:
            raise PrepareError(
                f"claim {ref.describe()}: unknown device(s) {', '.join(unknown)}: driver "
                f"{self.driver} publishes no such device in pool {self.pool_name}"
            )
        if asks and cpus:
            raise PrepareError(
                f"claim {ref.describe()}: mixes grouped and per-CPU devices of {self.driver}"
            )
        return Allocated(tuple(prepared), cpus, tuple(asks))

    def _consumed(
        self, ref: ClaimRef, device: str, consumed: Mapping[str, str], offered: int
    ) -> int:
        """The whole number of CPUs a result consumes of grouped ``device``."""
        where = f"claim {ref.describe()}: device {device}"
        names = (model.GROUP_CAPACITY, f"{self.driver}/{model.GROUP_CAPACITY}")
        text = next((consumed[n] for n in names if n in consumed), None)
        if text is None:
            raise PrepareError(
                f"{where} is shared by capacity, but the allocation says no consumedCapacity "
                f"{model.GROUP_CAPACITY!r} (was it allocated with DRAConsumableCapacity off?)"
            )
        try:
            amount = quantity.Quantity.parse(text).amount
        except quantity.QuantityError as e:
            raise PrepareError(f"{where}: consumedCapacity {model.GROUP_CAPACITY}: {e}") from e
        if amount.denominator != 1:
            raise PrepareError(f"{where}: consumedCapacity {text!r} is not a whole number of CPUs")
        if amount < 1:
            raise PrepareError(f"{where}: consumedCapacity {text!r}: a claim needs at least 1 CPU")
        if amount > offered:
            raise PrepareError(
                f"{where}: consumedCapacity {text!r} is more than the group's {offered} CPUs"
            )
        return int(amount)

    def _answer(
        self, record: ClaimRecord, claim: AllocatedClaim, devices: Mapping[str, model.Device]
    ) -> tuple[PreparedDevice, ...]:
        cdi_id = self.cdi.device_id(record.uid)
        # By request and device: under a prioritized list one shared device may serve two
        # requests of the claim, each result with its own shareID.
        shares = {(r.request, r.device): r.share_id for r in claim.results}
        return tuple(
            PreparedDevice(
                pool=self.pool_name,
                device=r.device,
                requests=(r.request,) if r.request else (),
                cdi_ids=(cdi_id,),
                share_id=shares.get((r.request, r.device)),
                metadata=_metadata(devices.get(r.device), record.cpus),
            )
            for r in record.results
        )


def _check_same_allocation(ref: ClaimRef, record: ClaimRecord, allocated: Allocated) -> None:
    """A prepared claim is prepared again only for the allocation it was prepared for."""
    mode = {True: "grouped", False: "per-CPU"}
    if record.grouped != allocated.grouped:
        raise PrepareError(
            f"claim {ref.describe()} was prepared from {mode[record.grouped]} devices; its "
            f"allocation now names {mode[allocated.grouped]} devices (dra.cpuDeviceMode "
            "changed since); unprepare it first"
        )
    if allocated.grouped:
        asked = sum(count for _, count in allocated.asks)
        if record.results != allocated.results or len(record.cpus) != asked:
            raise PrepareError(
                f"claim {ref.describe()} is already prepared with {len(record.cpus)} CPUs of "
                f"{', '.join(r.device for r in record.results)}; its allocation now asks "
                f"{asked} of {', '.join(r.device for r in allocated.results)}"
            )
    elif record.cpus != allocated.cpus:
        raise PrepareError(
            f"claim {ref.describe()} is already prepared with cpus {record.cpus}; its "
            f"allocation now names cpus {allocated.cpus}"
        )


ALLOCATED_NUM_CPUS = "allocatedNumCPUs"
"""dra-driver-cpu's metadata-only attribute of a grouped device: the claim's CPUs in it."""
ALLOCATED_CPUS = "allocatedCPUs"
"""Ours, beside it: their Linux CPU ids (a list of numbers), so the workload knows which."""


def _metadata(device: model.Device | None, claimed: CpuSet) -> dict[str, MetadataValue] | None:
    """The attributes a workload reads from its device metadata file: the slice's, with
    unqualified names as the slice files them. A per-CPU device names its CPU (``cpuID``); a
    grouped device gets the CPUs Prepare picked in the group (two results on one group, the
    claim's CPUs there for both)."""
    if device is None:
        return None
    out: dict[str, MetadataValue] = dict(device.attributes)
    if device.shared:
        mine = sorted(claimed & CpuSet(device.cpus))
        out |= {ALLOCATED_NUM_CPUS: len(mine), ALLOCATED_CPUS: tuple(mine)}
    return out


def _describe(record: ClaimRecord) -> str:
    return f"{record.namespace}/{record.name} ({record.uid})"
