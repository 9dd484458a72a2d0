"""What a DRA driver supplies to the kubelet-plugin layer: its devices, Prepare and Unprepare.

The layer (registration, the DRA gRPC service, the slice publisher, device metadata) knows
nothing of what devices stand for, as ``k8s.io/dynamic-resource-allocation/kubeletplugin``
knows nothing of dra-driver-cpu's CPUs; a ``Driver`` does. The layer calls it with claims it
has already read and checked (``claims.AllocatedClaim``), one call per kubelet request, and
never concurrently with another Prepare or Unprepare.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import attrs

from nri_resmgr.dra.kubeletplugin.claims import AllocatedClaim, ClaimRef
from nri_resmgr.dra.kubeletplugin.devices import Device, MetadataValue


@attrs.frozen
class PreparedDevice:
    """One device of a prepared claim, as kubelet gets it."""

    pool: str
    device: str
    requests: tuple[str, ...] = ()
    """The allocation results' request names (``req`` or ``req/sub``; kubelet gets the base
    names). Empty: the device is for every container of the claim."""
    cdi_ids: tuple[str, ...] = ()
    share_id: str | None = None
    metadata: Mapping[str, MetadataValue] | None = None
    """Attributes for the device metadata file (KEP-5304); None: the device is listed there
    without attributes."""


@attrs.frozen
class PrepareResult:
    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""


class Driver(Protocol):
    async def devices(self) -> Sequence[Device]:
        """The devices to publish in this node's pool, in preference order."""

    async def prepare(self, claims: Sequence[AllocatedClaim]) -> Mapping[str, PrepareResult]:
        """Claim UID -> result, for every claim given; idempotent per UID."""

    async def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, str]:
        """Claim UID -> error ('' for success), for every claim given; a claim this driver
        never prepared succeeds."""
