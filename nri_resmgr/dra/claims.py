"""Prepare and Unprepare of CPU claims: from kubelet's claim reference to claimed CPUs.

Prepare, per claim: GET the ResourceClaim (UID checked), take the allocation results of this
driver, map their devices to CPUs (the policy's published devices), claim the CPUs in the
policy under the manager lock (they leave the shared pools; shared containers are updated),
write the claim's CDI spec, persist the record, then answer. Any failure undoes the steps
taken, in reverse, so a failed claim leaves nothing behind; the error names the cause.

Unprepare, per claim: release the CPUs, remove the CDI spec, drop the record. A claim with no
record (never prepared here, or already unprepared) succeeds: kubelet retries unprepare and
may send claims whose Prepare failed.

Claim UIDs: kubelet's UIDs become file names (the CDI spec) and env var names, so a UID that
is not a Kubernetes UID (``state.CLAIM_UID``) is refused before anything else by Prepare;
Unprepare of one succeeds at once (nothing can have been prepared under it) and builds no
path.

Idempotency: a second Prepare of a prepared UID answers the same devices and CDI ids (the
policy claim and CDI file are re-asserted, not duplicated). At daemon start, ``restore``
re-claims every recorded claim in the policy before any NRI request is served, so Synchronize
already finds the claims' containers.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import attrs
import trio

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.dra.cdi import CdiError, CdiWriter
from nri_resmgr.dra.service import ClaimOutcome, ClaimRef, PreparedDevice
from nri_resmgr.dra.state import ClaimRecord, ClaimStore, PreparedResult, StateError, uid_problem
from nri_resmgr.errors import ResmgrError
from nri_resmgr.kube import ApiResource, KubeObject, NotFound
from nri_resmgr.kube.resources import RESOURCE_CLAIMS
from nri_resmgr.resmgr.model import Device
from nri_resmgr.resmgr.policy import ClaimError, Policy
from nri_resmgr.shorten import shorten

log = logging.getLogger(__name__)

CLAIM_GET_TIMEOUT = 10.0
"""Seconds for the ResourceClaim GET; kubelet gives the whole call 45 s."""


class PrepareError(ResmgrError):
    """One claim cannot be prepared; the message is the per-claim error kubelet gets."""


class ClaimOwner(Protocol):
    """What Prepare needs from the resource manager (``ResourceManager`` satisfies it)."""

    async def dra_devices(self) -> list[Device]: ...
    async def claim_cpus(self, claim_uid: str, cpus: CpuSet) -> None: ...
    async def release_claim(self, claim_uid: str) -> None: ...


class ClaimReader(Protocol):
    async def get(
        self,
        resource: ApiResource,
        name: str,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> KubeObject: ...


@attrs.frozen
class Allocated:
    """The part of a claim's allocation that is this driver's, mapped to CPUs."""

    results: tuple[PreparedResult, ...]
    cpus: CpuSet


class ClaimPreparer:
    def __init__(
        self,
        manager: ClaimOwner,
        kube: ClaimReader,
        driver: str,
        pool_name: str,
        store: ClaimStore,
        cdi: CdiWriter,
    ) -> None:
        self.manager = manager
        self.kube = kube
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
            try:
                policy.claim_cpus(record.uid, record.cpus)
            except ClaimError as e:
                log.error("DRA claim %s could not be restored (kept for unprepare): %s",
                          _describe(record), e)  # fmt: skip
                continue
            if not self.cdi.exists(record.uid):
                try:
                    self.cdi.write(record.uid, record.cpus)
                except CdiError as e:
                    log.error("DRA claim %s: %s", _describe(record), e)
        if self.store.records:
            log.info("restored %d prepared DRA claims", len(self.store.records))

    # -- kubelet's calls --------------------------------------------------------------------

    async def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, ClaimOutcome]:
        return {c.uid: await self._outcome(self._prepare_one, c) for c in claims}

    async def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, ClaimOutcome]:
        return {c.uid: await self._outcome(self._unprepare_one, c) for c in claims}

    async def _outcome(self, step: Any, claim: ClaimRef) -> ClaimOutcome:
        try:
            return ClaimOutcome(devices=await step(claim))
        except (ResmgrError, OSError) as e:
            log.warning("DRA claim %s: %s", shorten(claim.describe(), 400), e)
            return ClaimOutcome(error=str(e))

    async def _prepare_one(self, ref: ClaimRef) -> tuple[PreparedDevice, ...]:
        _check_uid(ref)
        self._check_store()
        claim = await self._fetch(ref)
        allocated = self._allocated(ref, claim, await self.manager.dra_devices())
        record = self.store.get(ref.uid)
        if record is not None and record.cpus != allocated.cpus:
            raise PrepareError(
                f"claim {ref.describe()} is already prepared with cpus {record.cpus}; its "
                f"allocation now names cpus {allocated.cpus}"
            )
        try:
            await self.manager.claim_cpus(ref.uid, allocated.cpus)
        except ClaimError as e:
            raise PrepareError(f"claim {ref.describe()}: {e}") from e
        if record is None:
            record = await self._persist(ref, allocated)
        elif not self.cdi.exists(ref.uid):
            self.cdi.write(ref.uid, record.cpus)
        return self._answer(record)

    async def _persist(self, ref: ClaimRef, allocated: Allocated) -> ClaimRecord:
        """CDI spec, then the record; on failure neither is left and the CPUs go back."""
        try:
            self.cdi.write(ref.uid, allocated.cpus)
        except CdiError:
            await self.manager.release_claim(ref.uid)
            raise
        record = ClaimRecord(ref.uid, ref.namespace, ref.name, allocated.cpus, allocated.results)
        try:
            self.store.put(record)
        except StateError:
            try:
                self.cdi.remove(ref.uid)
            finally:
                await self.manager.release_claim(ref.uid)
            raise
        log.info("DRA claim %s prepared: cpus %s", ref.describe(), allocated.cpus)
        return record

    async def _unprepare_one(self, ref: ClaimRef) -> tuple[PreparedDevice, ...]:
        if uid_problem(ref.uid):
            # Never prepared here (no record has such a UID): nothing to do, no path built.
            log.debug("DRA unprepare of claim with a malformed UID: nothing prepared")
            return ()
        self._check_store()
        record = self.store.get(ref.uid)
        if record is None:
            # Never prepared here (or already unprepared): success, and no stray spec left.
            self.cdi.remove(ref.uid)
            return ()
        await self.manager.release_claim(ref.uid)
        self.cdi.remove(ref.uid)
        self.store.remove(ref.uid)
        log.info("DRA claim %s unprepared: cpus %s released", ref.describe(), record.cpus)
        return ()

    def _check_store(self) -> None:
        if self.store.broken:
            raise StateError(self.store.broken)

    # -- the claim --------------------------------------------------------------------------

    async def _fetch(self, ref: ClaimRef) -> Mapping[str, Any]:
        what = f"ResourceClaim {ref.namespace}/{ref.name}"
        try:
            with trio.fail_after(CLAIM_GET_TIMEOUT):
                claim = await self.kube.get(RESOURCE_CLAIMS, ref.name, ref.namespace)
        except NotFound as e:
            raise PrepareError(f"{what} not found") from e
        except trio.TooSlowError as e:
            raise PrepareError(f"cannot read {what}: the API server did not answer in time") from e
        except ResmgrError as e:
            raise PrepareError(f"cannot read {what}: {e}") from e
        uid = str((claim.get("metadata") or {}).get("uid") or "")
        if uid != ref.uid:
            raise PrepareError(
                f"{what} has UID {uid or '(none)'}, kubelet asked for {ref.uid} "
                "(the claim was replaced)"
            )
        return claim

    def _allocated(
        self, ref: ClaimRef, claim: Mapping[str, Any], devices: Sequence[Device]
    ) -> Allocated:
        allocation = (claim.get("status") or {}).get("allocation")
        if not allocation:
            raise PrepareError(f"claim {ref.describe()} is not allocated")
        results = (allocation.get("devices") or {}).get("results") or []
        ours = [r for r in results if isinstance(r, dict) and r.get("driver") == self.driver]
        if not ours:
            drivers = sorted({str(r.get("driver")) for r in results if isinstance(r, dict)})
            raise PrepareError(
                f"claim {ref.describe()} has no allocation result for driver {self.driver} "
                f"(its results are for {', '.join(drivers) or 'no driver'})"
            )
        by_name = {d.name: d for d in devices}
        prepared: list[PreparedResult] = []
        cpus = CpuSet()
        unknown: list[str] = []
        for r in ours:
            device, pool = str(r.get("device") or ""), str(r.get("pool") or "")
            if pool != self.pool_name:
                raise PrepareError(
                    f"claim {ref.describe()}: device {pool}/{device} is from pool {pool}, "
                    f"not this node's pool {self.pool_name} (allocated for another node)"
                )
            if r.get("adminAccess"):
                raise PrepareError(
                    f"claim {ref.describe()}: device {device} is allocated with adminAccess, "
                    "which CPU devices do not support (the CPUs may belong to another claim)"
                )
            known = by_name.get(device)
            if known is None or not known.cpus:
                unknown.append(device)
                continue
            cpus = cpus | CpuSet(known.cpus)
            prepared.append(PreparedResult(str(r.get("request") or ""), device))
        if unknown:
            raise PrepareError(
                f"claim {ref.describe()}: unknown device(s) {', '.join(unknown)}: driver "
                f"{self.driver} publishes no such device in pool {self.pool_name}"
            )
        return Allocated(tuple(prepared), cpus)

    def _answer(self, record: ClaimRecord) -> tuple[PreparedDevice, ...]:
        cdi_id = self.cdi.device_id(record.uid)
        return tuple(
            PreparedDevice(
                device=r.device,
                # "req/sub" under DRAPrioritizedList: the container names the base request.
                request_names=(r.request.split("/", 1)[0],) if r.request else (),
                cdi_ids=(cdi_id,),
            )
            for r in record.results
        )


def _check_uid(ref: ClaimRef) -> None:
    problem = uid_problem(ref.uid)
    if problem:
        where = f"{shorten(ref.namespace, 63)}/{shorten(ref.name, 253)}"
        raise PrepareError(f"claim {where}: {problem}")


def _describe(record: ClaimRecord) -> str:
    return f"{record.namespace}/{record.name} ({record.uid})"
