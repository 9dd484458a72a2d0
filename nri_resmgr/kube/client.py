"""An async Kubernetes API client on httpx: object CRUD, patches, lists and raw watch streams.

Objects are plain JSON dicts (``KubeObject``); callers structure the parts they need.
"""

from __future__ import annotations

import enum
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any

import httpx

from nri_resmgr.backoff import Backoff
from nri_resmgr.kube import decode, stream
from nri_resmgr.kube.auth import BearerAuth
from nri_resmgr.kube.config import ClusterConfig
from nri_resmgr.kube.errors import BadResponse, connection_error, error_from_body
from nri_resmgr.kube.objects import KubeObject, ObjectList
from nri_resmgr.kube.resources import ApiResource
from nri_resmgr.kube.watch import Watch

log = logging.getLogger(__name__)

# A merge/strategic patch is an object, a JSON patch a list of operations.
PatchBody = KubeObject | list[KubeObject]

LIST_PAGE_SIZE = 500


class PatchType(enum.Enum):
    """The patch flavours, named by their content type."""

    MERGE = "application/merge-patch+json"
    JSON = "application/json-patch+json"
    STRATEGIC = "application/strategic-merge-patch+json"
    APPLY = "application/apply-patch+yaml"
    """Server-side apply: the whole wanted object, created or updated in one request."""


class KubeClient:
    """One connection pool to one API server. Close it with ``aclose()`` or ``async with``."""

    def __init__(
        self,
        config: ClusterConfig,
        *,
        timeout: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        config.check_transport()
        self.config = config
        self.timeout = timeout
        verify: Any = config.ssl_context() if config.server.startswith("https:") else True
        self._http = httpx.AsyncClient(
            base_url=config.server,
            verify=verify,
            auth=BearerAuth(config.token) if config.token else None,
            timeout=httpx.Timeout(timeout),
            transport=transport,
            headers={"Accept": "application/json", "User-Agent": "nri-resmgr"},
        )

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def get(
        self,
        resource: ApiResource,
        name: str,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> KubeObject:
        return await self.request("GET", resource.object_path(name, namespace, subresource))

    async def list(
        self,
        resource: ApiResource,
        namespace: str | None = None,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
    ) -> ObjectList:
        """Every matching object, following ``continue`` tokens page by page."""
        path = resource.collection_path(namespace)
        params = _selectors(field_selector, label_selector) | {"limit": str(LIST_PAGE_SIZE)}
        items: list[KubeObject] = []
        while True:
            page = await self.request("GET", path, params=params)
            page_items = page.get("items") or []
            if not isinstance(page_items, list) or not all(isinstance(i, dict) for i in page_items):
                raise BadResponse(0, "BadResponse", f"list {path}: items are not objects")
            items.extend(_with_kind(page_items, resource))
            meta = page.get("metadata") or {}
            if not meta.get("continue"):
                return ObjectList(tuple(items), str(meta.get("resourceVersion", "")))
            params = params | {"continue": meta["continue"]}

    async def create(
        self, resource: ApiResource, obj: KubeObject, namespace: str | None = None
    ) -> KubeObject:
        ns = _namespace_of(resource, obj, namespace)
        return await self.request("POST", resource.collection_path(ns), body=obj)

    async def replace(
        self,
        resource: ApiResource,
        obj: KubeObject,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> KubeObject:
        """PUT the whole object; its ``metadata.resourceVersion`` guards against lost updates."""
        name = _name_of(obj)
        ns = _namespace_of(resource, obj, namespace)
        return await self.request("PUT", resource.object_path(name, ns, subresource), body=obj)

    async def patch(
        self,
        resource: ApiResource,
        name: str,
        patch: PatchBody,
        namespace: str | None = None,
        *,
        patch_type: PatchType = PatchType.MERGE,
        subresource: str | None = None,
        field_manager: str | None = None,
        force: bool = False,
    ) -> KubeObject:
        """``field_manager`` (required by APPLY) names the writer; ``force`` makes an APPLY
        take over fields another manager set instead of answering 409."""
        if patch_type is PatchType.JSON and not isinstance(patch, list):
            raise ValueError("a JSON patch is a list of operations")
        if patch_type is not PatchType.JSON and not isinstance(patch, dict):
            raise ValueError(f"a {patch_type.name.lower()} patch is an object")
        if patch_type is PatchType.APPLY and not field_manager:
            raise ValueError("server-side apply needs a field_manager")
        params = {"fieldManager": field_manager} if field_manager else {}
        if force:
            params["force"] = "true"
        path = resource.object_path(name, namespace, subresource)
        return await self.request("PATCH", path, params=params or None, body=patch,
                                  content_type=patch_type.value)  # fmt: skip

    async def delete(
        self,
        resource: ApiResource,
        name: str,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        propagation_policy: str | None = None,
    ) -> KubeObject:
        """Deletes; returns the object (still terminating, with finalizers) or a Status."""
        options: KubeObject = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if resource_version:
            options["preconditions"] = {"resourceVersion": resource_version}
        if propagation_policy:
            options["propagationPolicy"] = propagation_policy
        return await self.request("DELETE", resource.object_path(name, namespace), body=options)

    def watch(
        self,
        resource: ApiResource,
        namespace: str | None = None,
        *,
        name: str | None = None,
        field_selector: str | None = None,
        label_selector: str | None = None,
        resource_version: str | None = None,
        backoff: Backoff | None = None,
        timeout_seconds: int = 300,
        watch_list: bool = True,
    ) -> Watch:
        """A resilient watch; see ``nri_resmgr.kube.watch.Watch`` for its event semantics."""
        return Watch(
            self,
            resource,
            namespace,
            name=name,
            field_selector=field_selector,
            label_selector=label_selector,
            resource_version=resource_version,
            backoff=backoff,
            timeout_seconds=timeout_seconds,
            watch_list=watch_list,
        )

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        body: object = None,
        content_type: str = "application/json",
    ) -> KubeObject:
        """One request; a non-2xx reply or a transport failure raises a typed ``ApiError``."""
        content = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type} if content is not None else None
        try:
            resp = await self._http.request(
                method, path, params=params, content=content, headers=headers
            )
        except httpx.TransportError as exc:
            raise connection_error(exc) from exc
        if resp.status_code >= 400:
            raise error_from_body(resp.status_code, resp.content)
        return _decode(resp.content, method, path)

    @asynccontextmanager
    async def stream_lines(
        self, path: str, params: dict[str, str], *, read_timeout: float | None
    ) -> AsyncIterator[AsyncIterator[str]]:
        """A long GET whose reply arrives line by line (watch); errors as in ``request``.

        The body is asked for in gzip (only that: the one coding kube-apiserver offers) and
        decoded by ``stream.lines``, which reads every gzip member: a watch-list's reply from
        kube-apiserver 1.37 has one per flush, and httpx's own decoder reads only the first.
        """
        timeout = httpx.Timeout(self.timeout, read=read_timeout)
        headers = {"Accept-Encoding": "gzip"}
        try:
            async with self._http.stream(
                "GET", path, params=params, timeout=timeout, headers=headers
            ) as resp:
                if resp.status_code >= 400:
                    raise error_from_body(resp.status_code, await resp.aread())
                decode = stream.decoder_for(resp.headers.get("Content-Encoding", ""))
                # A coding we did not ask for (a proxy's?) is left to httpx, which knows more.
                yield (
                    resp.aiter_lines() if decode is None else stream.lines(resp.aiter_raw(), decode)
                )
        except httpx.TransportError as exc:
            raise connection_error(exc) from exc


def _decode(content: bytes, method: str, path: str) -> KubeObject:
    if not content:
        return {}
    try:
        decoded = decode.loads(content)
    except ValueError as exc:
        raise BadResponse(0, "BadResponse", f"{method} {path}: reply is not JSON") from exc
    if not isinstance(decoded, dict):
        raise BadResponse(0, "BadResponse", f"{method} {path}: reply is not a JSON object")
    return decoded


def _selectors(field_selector: str | None, label_selector: str | None) -> dict[str, str]:
    params = {}
    if field_selector:
        params["fieldSelector"] = field_selector
    if label_selector:
        params["labelSelector"] = label_selector
    return params


def _with_kind(items: list[KubeObject], resource: ApiResource) -> list[KubeObject]:
    # List items come without kind/apiVersion; fill them so items look like single GETs.
    if not resource.kind:
        return items
    return [{"apiVersion": resource.api_version, "kind": resource.kind} | i for i in items]


def _name_of(obj: KubeObject) -> str:
    name = (obj.get("metadata") or {}).get("name")
    if not name:
        raise ValueError("object has no metadata.name")
    return str(name)


def _namespace_of(resource: ApiResource, obj: KubeObject, namespace: str | None) -> str | None:
    if not resource.namespaced:
        return None
    ns = namespace or (obj.get("metadata") or {}).get("namespace")
    if not ns:
        raise ValueError(f"{resource.plural} is namespaced: give a namespace or metadata.namespace")
    return str(ns)


__all__ = ["KubeClient", "KubeObject", "ObjectList", "PatchType"]
