"""A ``Driver`` for tests of the kubelet-plugin layer: it prepares each claim as one device per
allocation result (no CPUs anywhere), and answers what a test tells it to."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence

import trio

from nri_resmgr.dra.kubeletplugin import (
    AllocatedClaim,
    ClaimRef,
    Device,
    PreparedDevice,
    PrepareResult,
)
from nri_resmgr.kube import ApiResource, KubeObject
from tests.dra.claim_setup import Claims, claim_object

DRIVER = "fake.nri.io"


def uid(label: str) -> str:
    """A Kubernetes-shaped claim UID, the same for the same label."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, label))


class AllocatedEverywhere(Claims):
    """Every claim ``default/claim-<uid>`` that is not stored exists, allocated one device
    (``dev0``) of the fake driver: kubelet's requests of the plugin tests just work."""

    async def get(
        self,
        resource: ApiResource,
        name: str,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> KubeObject:
        if (namespace or "", name) not in self.objects and name.startswith("claim-"):
            self.add(claim_object(name.removeprefix("claim-"), ["dev0"], driver=DRIVER))
        return await super().get(resource, name, namespace, subresource=subresource)


def numbered_uid(n: int) -> str:
    """The ``n``th of a series of Kubernetes-shaped claim UIDs."""
    return f"00000000-0000-4000-8000-{n:012d}"


class FakeDriver:
    def __init__(self, devices: Sequence[Device] = ()) -> None:
        self.published = list(devices)
        self.prepared: list[list[str]] = []
        self.unprepared: list[list[str]] = []
        self.errors: dict[str, str] = {}
        """Claim UID -> the error its Prepare answers."""
        self.forget: set[str] = set()
        """Claim UIDs Prepare gives no answer for (a driver bug the layer must catch)."""
        self.explode = False
        self.hold: trio.Event | None = None
        """When set, Prepare waits for it (to see what else runs meanwhile)."""
        self.running = 0
        self.most_running = 0

    async def devices(self) -> list[Device]:
        return list(self.published)

    async def prepare(self, claims: Sequence[AllocatedClaim]) -> Mapping[str, PrepareResult]:
        self.prepared.append([c.ref.uid for c in claims])
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            if self.hold is not None:
                await self.hold.wait()
            if self.explode:
                raise RuntimeError("driver exploded")
            answers = {}
            for c in claims:
                if c.ref.uid in self.forget:
                    continue
                error = self.errors.get(c.ref.uid)
                devices = tuple(self._device(c, i) for i in range(len(c.results)))
                answers[c.ref.uid] = PrepareResult(error=error) if error else PrepareResult(devices)
            return answers
        finally:
            self.running -= 1

    async def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, str]:
        self.unprepared.append([c.uid for c in claims])
        if self.explode:
            raise RuntimeError("driver exploded")
        return {c.uid: self.errors.get(c.uid, "") for c in claims}

    @staticmethod
    def _device(claim: AllocatedClaim, index: int) -> PreparedDevice:
        r = claim.results[index]
        return PreparedDevice(
            pool=r.pool,
            device=r.device,
            requests=(r.request,) if r.request else (),
            cdi_ids=(f"fake.nri.io/dev=claim-{claim.ref.uid}",),
            share_id=r.share_id,
            metadata={"index": index, "fake.nri.io/kind": "fake"},
        )


class LockedDriver(FakeDriver):
    """A FakeDriver that prepares under ``lock`` (the manager lock, as the CPU driver claims
    CPUs under it), so kubelet's calls contend with NRI's as in the daemon."""

    def __init__(self, lock: trio.Lock, devices: Sequence[Device] = ()) -> None:
        super().__init__(devices)
        self.lock = lock

    async def prepare(self, claims: Sequence[AllocatedClaim]) -> Mapping[str, PrepareResult]:
        async with self.lock:
            return await super().prepare(claims)
