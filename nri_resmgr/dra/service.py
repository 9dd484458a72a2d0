"""The DRA node service (``DRAPlugin``), served as v1 and v1beta1 on the DRA socket.

kubelet sends all of one pod's claims for our driver in one call and expects exactly one
answer per claim UID. ``ClaimService`` asks the resource manager (which takes the manager lock
and consults the policy) and turns its answer into one outcome per requested claim: a claim
the policy did not answer, or that failed, gets an error string in its own entry. The call as a
whole only fails for shutdown (UNAVAILABLE), so one bad claim never hides the others.

v1 and v1beta1 carry the same fields (v1 adds ``Device.share_id``, which we never set); the
two version shims differ only in which generated message classes they build.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from types import ModuleType
from typing import Any, Protocol

import attrs

from nri_resmgr._gen.k8s.io.kubelet.pkg.apis.dra import v1, v1beta1
from nri_resmgr.dra.grpc_bridge import TrioGate
from nri_resmgr.instrumentation.metrics import DRA_LATENCY, DRA_REQUESTS, observed
from nri_resmgr.resmgr.model import ClaimResult

log = logging.getLogger(__name__)


class ClaimBackend(Protocol):
    """What the service needs from the resource manager."""

    async def prepare_claims(self, claim_uids: Sequence[str]) -> list[ClaimResult]: ...
    async def unprepare_claims(self, claim_uids: Sequence[str]) -> list[ClaimResult]: ...


@attrs.frozen
class ClaimRef:
    uid: str
    namespace: str = ""
    name: str = ""

    def describe(self) -> str:
        return f"{self.namespace}/{self.name} ({self.uid})"


@attrs.frozen
class PreparedDevice:
    """One device of a prepared claim, as kubelet gets it."""

    device: str
    request_names: tuple[str, ...] = ()
    """Empty: the device is for every container of the claim."""
    cdi_ids: tuple[str, ...] = ()


@attrs.frozen
class ClaimOutcome:
    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""


class ClaimHandler(Protocol):
    """Prepares claims by reference (``dra.claims.ClaimPreparer``): one outcome per claim."""

    async def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, ClaimOutcome]: ...
    async def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, ClaimOutcome]: ...


class ClaimService:
    """Version-independent Prepare/Unprepare; plain trio code."""

    def __init__(
        self,
        backend: ClaimBackend,
        driver_name: str,
        pool_name: str,
        handler: ClaimHandler | None = None,
    ) -> None:
        self.backend = backend
        self.driver_name = driver_name
        self.pool_name = pool_name
        self.handler = handler
        """When set (the daemon with cluster access), claims are prepared by reference
        through it; otherwise the policy answers by UID (``backend``)."""

    async def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, ClaimOutcome]:
        with observed(DRA_REQUESTS, DRA_LATENCY, "NodePrepareResources"):
            if self.handler is not None:
                return await self._answer("prepare", self.handler.prepare, claims)
            return await self._answer("prepare", self._by_uid("prepare"), claims)

    async def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, ClaimOutcome]:
        with observed(DRA_REQUESTS, DRA_LATENCY, "NodeUnprepareResources"):
            if self.handler is not None:
                return await self._answer("unprepare", self.handler.unprepare, claims)
            return await self._answer("unprepare", self._by_uid("unprepare"), claims)

    def _by_uid(
        self, verb: str
    ) -> Callable[[Sequence[ClaimRef]], Awaitable[dict[str, ClaimOutcome]]]:
        ask = self.backend.prepare_claims if verb == "prepare" else self.backend.unprepare_claims

        async def answer(claims: Sequence[ClaimRef]) -> dict[str, ClaimOutcome]:
            return self._match(verb, claims, await ask([c.uid for c in claims]))

        return answer

    async def _answer(
        self,
        verb: str,
        ask: Callable[[Sequence[ClaimRef]], Awaitable[dict[str, ClaimOutcome]]],
        claims: Sequence[ClaimRef],
    ) -> dict[str, ClaimOutcome]:
        outcomes: dict[str, ClaimOutcome] = {}
        valid: dict[str, ClaimRef] = {}
        for claim in claims:
            if not claim.uid:
                outcomes[""] = ClaimOutcome(error=f"claim {claim.describe()} has no UID")
            else:
                valid.setdefault(claim.uid, claim)
        if not valid:
            return outcomes
        uids = list(valid)
        try:
            answered = await ask(list(valid.values()))
        except Exception as e:
            # The policy failed for the whole batch: every claim carries the reason.
            log.exception("DRA %s of claims %s failed", verb, uids)
            return outcomes | {uid: ClaimOutcome(error=f"{verb} failed: {e}") for uid in uids}
        for claim in valid.values():
            outcomes[claim.uid] = answered.get(claim.uid) or ClaimOutcome(
                error=f"driver {self.driver_name} has no {verb} answer for claim {claim.describe()}"
            )
        return outcomes

    def _match(
        self, verb: str, claims: Sequence[ClaimRef], results: Iterable[ClaimResult]
    ) -> dict[str, ClaimOutcome]:
        by_uid = {r.claim_uid: r for r in results}
        outcomes: dict[str, ClaimOutcome] = {}
        for claim in claims:
            result = by_uid.get(claim.uid)
            if result is None:
                outcomes[claim.uid] = ClaimOutcome(
                    error=f"driver {self.driver_name} has no {verb} answer for claim "
                    f"{claim.describe()}"
                )
            elif result.error:
                outcomes[claim.uid] = ClaimOutcome(error=result.error)
            else:
                outcomes[claim.uid] = ClaimOutcome(
                    devices=tuple(PreparedDevice(name) for name in result.devices)
                )
        return outcomes


def claim_refs(claims: Iterable[Any]) -> list[ClaimRef]:
    return [ClaimRef(uid=c.uid, namespace=c.namespace, name=c.name) for c in claims]


class _VersionShim:
    """Builds one API version's responses from ``ClaimOutcome``s."""

    def __init__(self, pb: ModuleType, claims: ClaimService) -> None:
        self._pb = pb
        self._claims = claims

    async def prepare(self, request: Any) -> Any:
        outcomes = await self._claims.prepare(claim_refs(request.claims))
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
        outcomes = await self._claims.unprepare(claim_refs(request.claims))
        pb = self._pb
        return pb.NodeUnprepareResourcesResponse(
            claims={
                uid: pb.NodeUnprepareResourceResponse(error=o.error) for uid, o in outcomes.items()
            }
        )

    def _device(self, device: PreparedDevice) -> Any:
        return self._pb.Device(
            request_names=list(device.request_names),
            pool_name=self._claims.pool_name,
            device_name=device.device,
            cdi_device_ids=list(device.cdi_ids),
        )


class DraV1Service(v1.DraPluginBase):  # type: ignore[misc]
    def __init__(self, gate: TrioGate, claims: ClaimService) -> None:
        self._gate = gate
        self._shim = _VersionShim(v1, claims)

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
        self._shim = _VersionShim(v1beta1, claims)

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
