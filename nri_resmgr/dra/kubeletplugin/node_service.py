"""The DRA node service (``DRAPlugin``), served as v1 and v1beta1 on the DRA socket.

kubelet sends all of one pod's claims for our driver in one call and expects exactly one
answer per claim UID. ``ClaimService`` reads and checks each claim (``claims.read_claim``,
outside the driver's turn, as the Go helper does), hands the good ones to the driver, writes
their device metadata, and turns everything into one outcome per requested claim: a claim
that failed anywhere gets an error string in its own entry. The driver is asked one request
at a time (``_turn``, the Go helper's default ``Serialize``): a Prepare and an Unprepare of
the same claim never interleave. The call as a whole only fails
for shutdown (UNAVAILABLE), so one bad claim never hides the others.

v1 and v1beta1 carry the same fields but ``Device.share_id`` (v1 only, kubelet 1.35+); the
two version shims differ only in which generated message classes they build.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

import attrs
import trio

from nri_resmgr._gen.k8s.io.kubelet.pkg.apis.dra import v1, v1beta1
from nri_resmgr.dra.kubeletplugin.claims import (
    AllocatedClaim,
    ClaimProblem,
    ClaimRef,
    base_request,
    read_claim,
    refs,
    uid_problem,
)
from nri_resmgr.dra.kubeletplugin.driver import Driver, PreparedDevice, PrepareResult
from nri_resmgr.dra.kubeletplugin.grpc_server import TrioGate
from nri_resmgr.dra.kubeletplugin.metadata import MetadataError, MetadataWriter, inject
from nri_resmgr.errors import ResmgrError
from nri_resmgr.instrumentation.metrics import observed
from nri_resmgr.kube.api import KubeApi
from nri_resmgr.shorten import shorten

log = logging.getLogger(__name__)


@attrs.frozen
class AnsweredDevice:
    """A prepared device with every CDI id kubelet gets for it (metadata mounts included)."""

    device: PreparedDevice
    cdi_ids: tuple[str, ...]


@attrs.frozen
class ClaimOutcome:
    devices: tuple[AnsweredDevice, ...] = ()
    error: str = ""


class ClaimService:
    """Version-independent Prepare/Unprepare; plain trio code."""

    def __init__(
        self,
        driver: Driver,
        driver_name: str,
        kube: KubeApi,
        *,
        metadata: MetadataWriter | None = None,
    ) -> None:
        self.driver = driver
        self.driver_name = driver_name
        self.kube = kube
        self.metadata = metadata
        self._turn = trio.Lock()

    async def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, ClaimOutcome]:
        with observed("dra", "NodePrepareResources"):
            outcomes: dict[str, ClaimOutcome] = {}
            checked: dict[str, AllocatedClaim] = {}
            for ref in _distinct(claims, outcomes, empty_is_error=True):
                try:
                    ref.check_uid()
                    checked[ref.uid] = await read_claim(self.kube, ref, self.driver_name)
                except ClaimProblem as e:
                    outcomes[ref.uid] = self._failed(ref, e)
            if checked:
                answered = await self._ask(self.driver.prepare, list(checked.values()), "prepare")
                for uid, claim in checked.items():
                    outcomes[uid] = self._prepared(claim, answered)
            return outcomes

    async def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, ClaimOutcome]:
        with observed("dra", "NodeUnprepareResources"):
            outcomes: dict[str, ClaimOutcome] = {}
            wanted = []
            for ref in _distinct(claims, outcomes, empty_is_error=False):
                if uid_problem(ref.uid):
                    # Never prepared here (nothing has such a UID): nothing to do, no path built.
                    outcomes[ref.uid] = ClaimOutcome()
                else:
                    wanted.append(ref)
            if wanted:
                answered = await self._ask(self.driver.unprepare, wanted, "unprepare")
                for ref in wanted:
                    outcomes[ref.uid] = self._unprepared(ref, answered)
            return outcomes

    async def _ask(self, step: Callable[[Any], Any], claims: list[Any], verb: str) -> Any:
        try:
            async with self._turn:
                return await step(claims)
        except Exception as e:
            # The driver failed for the whole batch: every claim carries the reason.
            log.exception("DRA %s of %d claims failed", verb, len(claims))
            return _BatchFailure(f"{verb} failed: {e}")

    def _prepared(self, claim: AllocatedClaim, answered: Any) -> ClaimOutcome:
        if isinstance(answered, _BatchFailure):
            return ClaimOutcome(error=answered.error)
        result: PrepareResult | None = answered.get(claim.ref.uid)
        if result is None:
            return self._missing("prepare", claim.ref)
        if result.error:
            return ClaimOutcome(error=result.error)
        ids: Mapping[str, str] = {}
        if self.metadata is not None:
            try:
                ids = self.metadata.write(claim, result.devices)
            except MetadataError as e:
                # As the Go helper: the claim stays prepared, the container runs without
                # the file; said once per Prepare.
                log.error("DRA claim %s: %s", claim.ref.describe(), e)
        return ClaimOutcome(
            devices=tuple(AnsweredDevice(d, cdi) for d, cdi in inject(result.devices, ids))
        )

    def _unprepared(self, ref: ClaimRef, answered: Any) -> ClaimOutcome:
        if isinstance(answered, _BatchFailure):
            return ClaimOutcome(error=answered.error)
        error: str | None = answered.get(ref.uid)
        if error is None:
            return self._missing("unprepare", ref)
        if error:
            return ClaimOutcome(error=error)
        if self.metadata is not None:
            try:
                self.metadata.remove(ref)
            except MetadataError as e:
                return ClaimOutcome(error=str(e))
        return ClaimOutcome()

    def _missing(self, verb: str, ref: ClaimRef) -> ClaimOutcome:
        return ClaimOutcome(
            error=f"driver {self.driver_name} has no {verb} answer for claim {ref.describe()}"
        )

    @staticmethod
    def _failed(ref: ClaimRef, error: ResmgrError) -> ClaimOutcome:
        log.warning("DRA claim %s: %s", shorten(ref.describe(), 400), error)
        return ClaimOutcome(error=str(error))


@attrs.frozen
class _BatchFailure:
    error: str


def _distinct(
    claims: Sequence[ClaimRef], outcomes: dict[str, ClaimOutcome], *, empty_is_error: bool
) -> list[ClaimRef]:
    """Each UID once. A claim without a UID is answered under the empty key: an error for
    Prepare, a success for Unprepare (nothing can have been prepared under it)."""
    seen: dict[str, ClaimRef] = {}
    for claim in claims:
        if claim.uid:
            seen.setdefault(claim.uid, claim)
        elif empty_is_error:
            outcomes[""] = ClaimOutcome(error=f"claim {claim.describe()} has no UID")
        else:
            outcomes[""] = ClaimOutcome()
    return list(seen.values())


class _VersionShim:
    """Builds one API version's responses from ``ClaimOutcome``s."""

    def __init__(self, pb: ModuleType, claims: ClaimService, *, share_ids: bool) -> None:
        self._pb = pb
        self._claims = claims
        self._share_ids = share_ids

    async def prepare(self, request: Any) -> Any:
        outcomes = await self._claims.prepare(refs(request.claims))
        pb = self._pb
        return pb.NodePrepareResourcesResponse(
            claims={
                uid: pb.NodePrepareResourceResponse(
                    devices=[self._device(d) for d in o.devices], error=o.error
                )
                for uid, o in outcomes.items()
            }
        )

    async def unprepare(self, request: Any) -> Any:
        outcomes = await self._claims.unprepare(refs(request.claims))
        pb = self._pb
        return pb.NodeUnprepareResourcesResponse(
            claims={
                uid: pb.NodeUnprepareResourceResponse(error=o.error) for uid, o in outcomes.items()
            }
        )

    def _device(self, answered: AnsweredDevice) -> Any:
        device = answered.device
        message = self._pb.Device(
            # "req/sub" under a prioritized list: kubelet matches these names as they are
            # against the request a container lists, which is "req" (never "req/sub").
            request_names=list(dict.fromkeys(base_request(r) for r in device.requests)),
            pool_name=device.pool,
            device_name=device.device,
            cdi_device_ids=list(answered.cdi_ids),
        )
        if self._share_ids and device.share_id is not None:
            message.share_id = device.share_id
        return message


class DraV1Service(v1.DraPluginBase):  # type: ignore[misc]
    def __init__(self, gate: TrioGate, claims: ClaimService) -> None:
        self._gate = gate
        self._shim = _VersionShim(v1, claims, share_ids=True)

    async def node_prepare_resources(
        self, node_prepare_resources_request: v1.NodePrepareResourcesRequest
    ) -> v1.NodePrepareResourcesResponse:
        return await self._gate.call(self._shim.prepare, node_prepare_resources_request)

    async def node_unprepare_resources(
        self, node_unprepare_resources_request: v1.NodeUnprepareResourcesRequest
    ) -> v1.NodeUnprepareResourcesResponse:
        return await self._gate.call(self._shim.unprepare, node_unprepare_resources_request)


class DraV1beta1Service(v1beta1.DraPluginBase):  # type: ignore[misc]
    def __init__(self, gate: TrioGate, claims: ClaimService) -> None:
        self._gate = gate
        self._shim = _VersionShim(v1beta1, claims, share_ids=False)

    async def node_prepare_resources(
        self, node_prepare_resources_request: v1beta1.NodePrepareResourcesRequest
    ) -> v1beta1.NodePrepareResourcesResponse:
        return await self._gate.call(self._shim.prepare, node_prepare_resources_request)

    async def node_unprepare_resources(
        self, node_unprepare_resources_request: v1beta1.NodeUnprepareResourcesRequest
    ) -> v1beta1.NodeUnprepareResourcesResponse:
        return await self._gate.call(self._shim.unprepare, node_unprepare_resources_request)


def dra_handlers(claims: ClaimService) -> Callable[[TrioGate], Sequence[Any]]:
    def build(gate: TrioGate) -> Sequence[Any]:
        return [DraV1Service(gate, claims), DraV1beta1Service(gate, claims)]

    return build
