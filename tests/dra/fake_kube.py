"""An in-process API server stand-in for fast publisher tests, with injectable faults.

It keeps ResourceSlices the way the API server does where the publisher can tell (generated
names, uid, resourceVersion, field selectors, 404 for versions not served, 409 on stale
resourceVersion) and raises the real ``nri_resmgr.kube`` errors.
"""

from __future__ import annotations

import builtins
import copy
import itertools
from typing import Any

import attrs
import trio

from nri_resmgr.kube import ApiResource, Conflict, KubeObject, NotFound, ObjectList, Unavailable

HANG = "hang"


@attrs.define
class Fault:
    """Fail the next call of ``method`` ("*" for any): an error to raise, or HANG."""

    method: str
    error: Exception | str


def server_error() -> Unavailable:
    return Unavailable(500, "InternalError", "etcd is on fire")


def conflict() -> Conflict:
    return Conflict(409, "Conflict", "the object has been modified")


class FakeKube:
    def __init__(
        self, nodes: dict[str, str], served: tuple[str, ...] = ("v1", "v1beta2", "v1beta1")
    ):
        self.nodes = dict(nodes)
        self.served = set(served)
        self.slices: dict[str, KubeObject] = {}
        self.faults: list[Fault] = []
        self.calls: list[str] = []
        self._ids = itertools.count(1)

    # -- the KubeApi protocol, without watch (see WatchedKube) -----------------------------

    async def get(
        self, resource: ApiResource, name: str, namespace: str | None = None, *,
        subresource: str | None = None,
    ) -> KubeObject:  # fmt: skip
        await self._enter("get", resource)
        assert resource.plural == "nodes", resource
        if name not in self.nodes:
            raise NotFound(404, "NotFound", f'nodes "{name}" not found')
        return {"metadata": {"name": name, "uid": self.nodes[name]}}

    async def list(
        self, resource: ApiResource, namespace: str | None = None, *,
        field_selector: str | None = None, label_selector: str | None = None,
    ) -> ObjectList:  # fmt: skip
        await self._enter("list", resource)
        wanted = parse_selector(field_selector or "")
        items = [copy.deepcopy(o) for o in self.slices.values() if matches(o, wanted)]
        return ObjectList(tuple(items), str(next(self._ids)))

    async def create(
        self, resource: ApiResource, obj: KubeObject, namespace: str | None = None
    ) -> KubeObject:
        await self._enter("create", resource)
        obj = copy.deepcopy(obj)
        meta = obj["metadata"]
        n = next(self._ids)
        meta["name"] = meta.get("name") or f"{meta['generateName']}{n:05d}"
        meta.update(uid=f"uid-{n}", resourceVersion=str(n), generation=1)
        self.slices[meta["name"]] = obj
        return copy.deepcopy(obj)

    async def replace(
        self, resource: ApiResource, obj: KubeObject, namespace: str | None = None, *,
        subresource: str | None = None,
    ) -> KubeObject:  # fmt: skip
        await self._enter("replace", resource)
        name = obj["metadata"]["name"]
        current = self._existing(name, obj["metadata"].get("resourceVersion"))
        obj = copy.deepcopy(obj)
        obj["metadata"].update(
            uid=current["metadata"]["uid"],
            resourceVersion=str(next(self._ids)),
            generation=current["metadata"]["generation"] + (obj["spec"] != current["spec"]),
        )
        self.slices[name] = obj
        return copy.deepcopy(obj)

    async def patch(
        self, resource: ApiResource, name: str, *args: Any, **kwargs: Any
    ) -> KubeObject:
        raise NotImplementedError("the publisher never patches")

    async def delete(
        self, resource: ApiResource, name: str, namespace: str | None = None, *,
        resource_version: str | None = None, propagation_policy: str | None = None,
    ) -> KubeObject:  # fmt: skip
        await self._enter("delete", resource)
        self._existing(name, resource_version)
        return self.slices.pop(name)

    # -- helpers for tests ----------------------------------------------------------------

    def fail(self, method: str, *errors: Exception | str) -> None:
        self.faults.extend(Fault(method, e) for e in errors)

    def edit_behind_our_back(self, name: str, **spec: Any) -> None:
        obj = self.slices[name]
        obj["spec"].update(spec)
        obj["metadata"]["resourceVersion"] = str(next(self._ids))

    def by_driver(self, driver: str) -> builtins.list[KubeObject]:
        return [o for o in self.slices.values() if o["spec"]["driver"] == driver]

    # -- internals ------------------------------------------------------------------------

    async def _enter(self, method: str, resource: ApiResource) -> None:
        self.calls.append(method)
        for i, fault in enumerate(self.faults):
            if fault.method in (method, "*"):
                del self.faults[i]
                if fault.error == HANG:
                    await trio.sleep_forever()
                assert isinstance(fault.error, Exception)
                raise fault.error
        if resource.group and resource.version not in self.served:
            raise NotFound(404, "NotFound", f"the server could not find {resource.version}")

    def _existing(self, name: str, resource_version: str | None) -> KubeObject:
        current = self.slices.get(name)
        if current is None:
            raise NotFound(404, "NotFound", f'resourceslices "{name}" not found')
        if resource_version and resource_version != current["metadata"]["resourceVersion"]:
            raise conflict()
        return current


def parse_selector(selector: str) -> dict[str, str]:
    pairs = [term.split("=", 1) for term in selector.split(",") if term]
    return {key: value for key, value in pairs}


def matches(obj: KubeObject, wanted: dict[str, str]) -> bool:
    spec = obj.get("spec") or {}
    fields = {"spec.nodeName": spec.get("nodeName") or "", "spec.driver": spec.get("driver")}
    return all(fields.get(k) == v for k, v in wanted.items())
