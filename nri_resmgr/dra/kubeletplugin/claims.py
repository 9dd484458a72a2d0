"""The claims kubelet names, as the kubelet-plugin layer hands them to a driver.

kubelet sends ``{namespace, uid, name}`` per claim (``ClaimRef``). Before a driver prepares
anything, the layer does what the Go helper (``kubeletplugin``) does: reads the
ResourceClaim, checks that it is the object kubelet meant (same UID) and that it is
allocated, and gives the driver its own allocation results, parsed (``AllocatedClaim``).
Unlike the Go helper, a claim that fails these checks fails alone, with an error naming the
cause, so one bad claim never hides the others of the pod.

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
        return self.request.split("/", 1)[0]

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
    annotations = (claim.get("metadata") or {}).get("annotations") or {}
    pod_claim = annotations.get(POD_CLAIM_NAME_ANNOTATION)
    return AllocatedClaim(
        ref,
        tuple(r for r in parsed if r.driver == driver),
        tuple(sorted({r.driver for r in parsed if r.driver != driver})),
        str(pod_claim) if pod_claim else None,
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
