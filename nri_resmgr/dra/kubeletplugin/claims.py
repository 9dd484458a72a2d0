"""The claims kubelet names, as the kubelet-plugin layer hands them to a driver.

kubelet sends ``{namespace, uid, name}`` per claim (``ClaimRef``). Before a driver prepares
anything, the layer does what the Go helper (``kubeletplugin``) does: reads the
ResourceClaim, checks that it is the object kubelet meant (same UID) and that it is
allocated, and gives the driver its own allocation results, parsed (``AllocatedClaim``).
Unlike the Go helper, a claim that fails these checks fails alone, with an error naming the
cause, so one bad claim never hides the others of the pod. Each of the driver's results must
name a request the claim has: ``<request>`` or, for a prioritized list (``firstAvailable``),
``<request>/<sub-request>`` (the API server's own rule); a driver never sees a result it could
not map to the claim's containers.

Claim UIDs become file names and env var names in drivers, so a UID that is not in the API
server's shape (``CLAIM_UID``) is refused before anything else.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import trio

from nri_resmgr.errors import ResmgrError
from nri_resmgr.kube import NotFound
from nri_resmgr.kube.api import KubeApi
from nri_resmgr.kube.resources import RESOURCE_CLAIMS
from nri_resmgr.shorten import short_repr, shorten

CLAIM_GET_TIMEOUT = 10.0
"""Seconds for the ResourceClaim GET; kubelet gives the whole call 45 s."""
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
"""Set by kube-controller-manager on a claim made from a template: the pod's name for it."""

CLAIM_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
"""The API server's UIDs (RFC 4122, lowercase, as ``uuid.NewUUID`` prints them); only such a
UID becomes part of a file name."""


class ClaimProblem(ResmgrError):
    """One claim cannot be used; the message is the per-claim error kubelet gets."""


def is_claim_uid(uid: str) -> bool:
    return CLAIM_UID.fullmatch(uid) is not None


def uid_problem(uid: str) -> str | None:
    """Why ``uid`` cannot be a claim's UID (None when it can)."""
    if is_claim_uid(uid):
        return None
    return (
        f"UID {short_repr(uid, 60)} is not a Kubernetes UID (8-4-4-4-12 lowercase hex "
        "digits); it is never used in a file name"
    )


@attrs.frozen
class ClaimRef:
    uid: str
    namespace: str = ""
    name: str = ""

    def describe(self) -> str:
        return f"{self.namespace}/{self.name} ({self.uid})"

    def check_uid(self) -> None:
        problem = uid_problem(self.uid)
        if problem:
            where = f"{shorten(self.namespace, 63)}/{shorten(self.name, 253)}"
            raise ClaimProblem(f"claim {where}: {problem}")


def base_request(name: str) -> str:
    """What a container's ``resources.claims[].request`` names for a result's request: the
    request itself, ``req`` of a prioritized list's ``req/sub`` (kubelet matches a device's
    request names against it as they are)."""
    return name.split("/", 1)[0]


@attrs.frozen
class AllocationResult:
    """One ``status.allocation.devices.results[]`` entry."""

    request: str
    """``<request>`` or, for a prioritized list (``firstAvailable``), ``<request>/<sub>``."""
    driver: str
    pool: str
    device: str
    admin_access: bool = False
    share_id: str | None = None
    """Set by the scheduler for a device several claims share (consumable capacity)."""
    consumed_capacity: Mapping[str, str] = attrs.field(factory=dict)
    """Capacity name -> the quantity (as the API wrote it) this claim consumes."""

    @property
    def base_request(self) -> str:
        """The request name a container lists (``request/sub`` -> ``request``)."""
        return base_request(self.request)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> AllocationResult:
        consumed = raw.get("consumedCapacity") or {}
        share = raw.get("shareID")
        return cls(
            request=str(raw.get("request") or ""),
            driver=str(raw.get("driver") or ""),
            pool=str(raw.get("pool") or ""),
            device=str(raw.get("device") or ""),
            admin_access=bool(raw.get("adminAccess")),
            share_id=str(share) if share else None,
            consumed_capacity=(
                {str(k): str(v) for k, v in consumed.items()} if isinstance(consumed, dict) else {}
            ),
        )


@attrs.frozen
class AllocatedClaim:
    """A claim that is allocated and is the one kubelet meant, with this driver's results."""

    ref: ClaimRef
    results: tuple[AllocationResult, ...]
    """This driver's results, in the claim's order."""
    other_drivers: tuple[str, ...] = ()
    """Drivers of the claim's other results (a claim may span drivers)."""
    pod_claim_name: str | None = None
    """The pod's name for a claim made from a template (its device metadata path uses it)."""


async def read_claim(kube: KubeApi, ref: ClaimRef, driver: str) -> AllocatedClaim:
    """The claim ``ref`` names, checked; ``ClaimProblem`` says what is wrong."""
    claim = await _fetch(kube, ref)
    status = claim.get("status") or {}
    allocation = status.get("allocation") if isinstance(status, dict) else None
    if not allocation:
        raise ClaimProblem(f"claim {ref.describe()} is not allocated")
    results = (allocation.get("devices") or {}).get("results") or []
    parsed = [AllocationResult.from_json(r) for r in results if isinstance(r, dict)]
    _check_requests(ref, claim, [r for r in parsed if r.driver == driver])
    annotations = (claim.get("metadata") or {}).get("annotations") or {}
    pod_claim = annotations.get(POD_CLAIM_NAME_ANNOTATION)
    return AllocatedClaim(
        ref,
        tuple(r for r in parsed if r.driver == driver),
        tuple(sorted({r.driver for r in parsed if r.driver != driver})),
        str(pod_claim) if pod_claim else None,
    )


def _claim_requests(claim: Mapping[str, Any]) -> dict[str, frozenset[str] | None]:
    """The claim's request names (``spec.devices.requests``): a request with ``exactly`` ->
    None, one with ``firstAvailable`` -> its sub-request names."""
    spec = claim.get("spec") or {}
    devices = spec.get("devices") if isinstance(spec, dict) else None
    requests = (devices or {}).get("requests") if isinstance(devices, dict) else None
    known: dict[str, frozenset[str] | None] = {}
    for request in requests if isinstance(requests, list) else []:
        if not isinstance(request, dict) or not isinstance(request.get("name"), str):
            continue
        subs = request.get("firstAvailable")
        known[request["name"]] = (
            frozenset(
                s["name"] for s in subs if isinstance(s, dict) and isinstance(s.get("name"), str)
            )
            if isinstance(subs, list)
            else None
        )
    return known


def _names_request(known: Mapping[str, frozenset[str] | None], name: str) -> bool:
    """Whether result request ``name`` is one of the claim's: ``req`` of any request, or
    ``req/sub`` of a prioritized list that has ``sub`` (as the API server validates it)."""
    base, slash, sub = name.partition("/")
    if base not in known:
        return False
    subs = known[base]
    return not slash or (subs is not None and sub in subs)


def _check_requests(
    ref: ClaimRef, claim: Mapping[str, Any], ours: Sequence[AllocationResult]
) -> None:
    known = _claim_requests(claim)
    wrong = [r for r in ours if not _names_request(known, r.request)]
    if not wrong:
        return
    have = ", ".join(
        f"{name}/{sub}" if subs is not None else name
        for name, subs in known.items()
        for sub in (sorted(subs) if subs is not None else [""])
    )
    r = wrong[0]
    raise ClaimProblem(
        f"claim {ref.describe()}: the allocation result for device {shorten(r.device, 128)} "
        f"names request {short_repr(r.request, 140)}, which the claim does not have (its "
        f"requests: {shorten(have, 400) or 'none'}); nothing is prepared"
    )


async def _fetch(kube: KubeApi, ref: ClaimRef) -> Mapping[str, Any]:
    what = f"ResourceClaim {ref.namespace}/{ref.name}"
    try:
        with trio.fail_after(CLAIM_GET_TIMEOUT):
            claim = await kube.get(RESOURCE_CLAIMS, ref.name, ref.namespace)
    except NotFound as e:
        raise ClaimProblem(f"{what} not found") from e
    except trio.TooSlowError as e:
        raise ClaimProblem(f"cannot read {what}: the API server did not answer in time") from e
    except ResmgrError as e:
        raise ClaimProblem(f"cannot read {what}: {e}") from e
    uid = str((claim.get("metadata") or {}).get("uid") or "")
    if uid != ref.uid:
        raise ClaimProblem(
            f"{what} has UID {uid or '(none)'}, kubelet asked for {ref.uid} "
            "(the claim was replaced)"
        )
    return claim


def refs(claims: Sequence[Any]) -> list[ClaimRef]:
    """ClaimRefs of a request's generated ``Claim`` messages (v1 and v1beta1 alike)."""
    return [ClaimRef(uid=c.uid, namespace=c.namespace, name=c.name) for c in claims]
