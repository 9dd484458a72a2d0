"""The Kubernetes API as its users see it: one protocol, which ``KubeClient`` satisfies.

Services that talk to the API server (the DRA kubelet plugin's claim reads and slice
publisher, ...) take a ``KubeApi`` rather than the concrete client, so fast tests pass an
in-process fake. A fake need not watch: ``isinstance(client, KubeApi)`` (the protocol is
runtime-checkable) tells a client that has every verb, ``watch`` included, from one that has
not, and a user may fall back to listing for the latter.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from nri_resmgr.kube.client import KubeClient, PatchBody, PatchType
from nri_resmgr.kube.objects import KubeObject, ObjectList
from nri_resmgr.kube.resources import ApiResource
from nri_resmgr.kube.watch import Watch

__all__ = ["KubeApi"]


@runtime_checkable
class KubeApi(Protocol):
    async def get(
        self,
        resource: ApiResource,
        name: str,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> KubeObject: ...

    async def list(
        self,
        resource: ApiResource,
        namespace: str | None = None,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
    ) -> ObjectList: ...

    async def create(
        self, resource: ApiResource, obj: KubeObject, namespace: str | None = None
    ) -> KubeObject: ...

    async def replace(
        self,
        resource: ApiResource,
        obj: KubeObject,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> KubeObject: ...

    async def patch(
        self,
        resource: ApiResource,
        name: str,
        patch: PatchBody,
        namespace: str | None = None,
        *,
        patch_type: PatchType = PatchType.MERGE,
        subresource: str | None = None,
    ) -> KubeObject: ...

    async def delete(
        self,
        resource: ApiResource,
        name: str,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        propagation_policy: str | None = None,
    ) -> KubeObject: ...

    def watch(
        self,
        resource: ApiResource,
        namespace: str | None = None,
        *,
        field_selector: str | None = None,
    ) -> Watch: ...


def _client_satisfies_protocol(client: KubeClient) -> KubeApi:
    return client  # mypy proves the real client fits KubeApi
