"""The ResourceSlice this node publishes, as JSON for the API server, and how to compare it.

One slice per node: pool named after the node, ``spec.nodeName`` set, owned by the Node (so
it is garbage-collected with it). Device shapes differ by API version: v1 and v1beta2 are
flat (``{name, attributes}``), v1beta1 nests the properties under ``basic``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from nri_resmgr.resmgr.model import Device

RESOURCE_GROUP = "resource.k8s.io"
# Probed in this order, like the Go client: v1 (1.34+), then the betas older servers serve.
SLICE_API_VERSIONS = ("v1", "v1beta2", "v1beta1")


@attrs.frozen
class SliceOwner:
    """The Node the slice belongs to."""

    name: str
    uid: str

    def reference(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "name": self.name,
            "uid": self.uid,
            "controller": True,
        }


@attrs.frozen
class DesiredSlice:
    driver: str
    node_name: str
    pool_name: str
    devices: tuple[Device, ...]
    owner: SliceOwner

    def spec(self, api_version: str, generation: int) -> dict[str, Any]:
        return {
            "driver": self.driver,
            "nodeName": self.node_name,
            "pool": {"name": self.pool_name, "generation": generation, "resourceSliceCount": 1},
            # An explicit [] (not null): older servers' Go types have no omitempty here.
            "devices": [device_json(d, api_version) for d in self.devices],
        }

    def new_object(self, api_version: str, generation: int) -> dict[str, Any]:
        return {
            "apiVersion": f"{RESOURCE_GROUP}/{api_version}",
            "kind": "ResourceSlice",
            "metadata": {
                "generateName": f"{self.node_name}-{self.driver}-",
                "ownerReferences": [self.owner.reference()],
            },
            "spec": self.spec(api_version, generation),
        }

    def updated_object(
        self, existing: Mapping[str, Any], api_version: str, generation: int
    ) -> dict[str, Any]:
        """A full replacement of ``existing`` (keeps its name and resourceVersion)."""
        metadata = dict(existing.get("metadata") or {})
        metadata["ownerReferences"] = [self.owner.reference()]
        return {
            "apiVersion": f"{RESOURCE_GROUP}/{api_version}",
            "kind": "ResourceSlice",
            "metadata": metadata,
            "spec": self.spec(api_version, generation),
        }

    def matches(self, existing: Mapping[str, Any], api_version: str) -> bool:
        """Whether ``existing`` already says what we want (generation aside)."""
        spec = existing.get("spec") or {}
        pool = spec.get("pool") or {}
        wanted = self.spec(api_version, 0)
        return (
            spec.get("driver") == self.driver
            and (spec.get("nodeName") or "") == self.node_name
            and pool.get("name") == self.pool_name
            and pool.get("resourceSliceCount") == 1
            and list(spec.get("devices") or []) == wanted["devices"]
            and self._owned(existing)
        )

    def _owned(self, existing: Mapping[str, Any]) -> bool:
        refs = (existing.get("metadata") or {}).get("ownerReferences") or []
        ours = self.owner.reference()
        return any(
            # controller too: the Node must be the managing owner, not merely one of them.
            all(ref.get(k) == ours[k] for k in ("apiVersion", "kind", "name", "uid", "controller"))
            for ref in refs
        )


def device_json(device: Device, api_version: str) -> dict[str, Any]:
    attributes = {key: attribute_json(value) for key, value in device.attributes.items()}
    body: dict[str, Any] = {"attributes": attributes} if attributes else {}
    if api_version == "v1beta1":
        return {"name": device.name, "basic": body}
    return {"name": device.name, **body}


def attribute_json(value: str | int | bool) -> dict[str, Any]:
    # bool first: it is an int subclass.
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    return {"string": value}


def pool_generation(obj: Mapping[str, Any]) -> int:
    pool = (obj.get("spec") or {}).get("pool") or {}
    generation = pool.get("generation", 0)
    return int(generation) if isinstance(generation, int | str) else 0


def pick_slice(
    slices: Sequence[Mapping[str, Any]], pool_name: str
) -> tuple[Mapping[str, Any] | None, list[Mapping[str, Any]]]:
    """The slice to keep (our pool, newest generation) and the extra ones to delete."""
    ours = [s for s in slices if ((s.get("spec") or {}).get("pool") or {}).get("name") == pool_name]
    keep = max(ours, key=pool_generation, default=None)
    extra = [s for s in slices if s is not keep]
    return keep, extra


def object_name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))
