"""The ResourceSlice this node publishes, as JSON for the API server, and how to compare it.

One pool per node, named after the node, in as many slices as the API's per-slice device
limit needs (``MAX_DEVICES_PER_SLICE``), all with the same ``pool.generation`` and
``resourceSliceCount`` = their number (the scheduler skips a pool whose slice count is off);
``spec.nodeName`` set, owned by the Node (so they are garbage-collected with it).
Device shapes differ by API version: v1 and v1beta2 are flat (``{name, attributes}``),
v1beta1 nests the properties under ``basic``. A shared device (consumable capacity) carries
``allowMultipleAllocations`` and its capacities' ``requestPolicy``; a server whose
``DRAConsumableCapacity`` gate is off drops both silently.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from nri_resmgr.dra.kubeletplugin.devices import Capacity, Device, RequestPolicy

RESOURCE_GROUP = "resource.k8s.io"
# Probed in this order, like the Go client: v1 (1.34+), then the betas older servers serve.
SLICE_API_VERSIONS = ("v1", "v1beta2", "v1beta1")
MAX_DEVICES_PER_SLICE = 128
"""``ResourceSliceMaxDevices`` (64 only with taints or counters, which we never publish)."""


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
    max_devices: int = MAX_DEVICES_PER_SLICE

    @property
    def slice_count(self) -> int:
        """Slices in the pool: at least one (an empty pool is one slice with no devices)."""
        return max(1, -(-len(self.devices) // self.max_devices))

    def chunk(self, index: int) -> tuple[Device, ...]:
        return self.devices[index * self.max_devices : (index + 1) * self.max_devices]

    def spec(self, api_version: str, generation: int, index: int = 0) -> dict[str, Any]:
        return {
            "driver": self.driver,
            "nodeName": self.node_name,
            "pool": {
                "name": self.pool_name,
                "generation": generation,
                "resourceSliceCount": self.slice_count,
            },
            # An explicit [] (not null): older servers' Go types have no omitempty here.
            "devices": [device_json(d, api_version) for d in self.chunk(index)],
        }

    def new_object(self, api_version: str, generation: int, index: int = 0) -> dict[str, Any]:
        return {
            "apiVersion": f"{RESOURCE_GROUP}/{api_version}",
            "kind": "ResourceSlice",
            "metadata": {
                "generateName": f"{self.node_name}-{self.driver}-",
                "ownerReferences": [self.owner.reference()],
            },
            "spec": self.spec(api_version, generation, index),
        }

    def updated_object(
        self, existing: Mapping[str, Any], api_version: str, generation: int, index: int = 0
    ) -> dict[str, Any]:
        """A full replacement of ``existing`` (keeps its name and resourceVersion)."""
        metadata = dict(existing.get("metadata") or {})
        metadata["ownerReferences"] = [self.owner.reference()]
        return {
            "apiVersion": f"{RESOURCE_GROUP}/{api_version}",
            "kind": "ResourceSlice",
            "metadata": metadata,
            "spec": self.spec(api_version, generation, index),
        }

    def matches(self, existing: Mapping[str, Any], api_version: str, index: int = 0) -> bool:
        """Whether ``existing`` already says what slice ``index`` should (generation aside)."""
        spec = existing.get("spec") or {}
        pool = spec.get("pool") or {}
        wanted = self.spec(api_version, 0, index)
        return (
            spec.get("driver") == self.driver
            and (spec.get("nodeName") or "") == self.node_name
            and pool.get("name") == self.pool_name
            and pool.get("resourceSliceCount") == self.slice_count
            and list(spec.get("devices") or []) == wanted["devices"]
            and self._owned(existing)
        )

    def pool_matches(self, slices: Sequence[Mapping[str, Any]], api_version: str) -> bool:
        """Whether ``slices`` (our pool's) are exactly the wanted ones, one generation."""
        if len(slices) != self.slice_count or len({pool_generation(s) for s in slices}) != 1:
            return False
        matched = set()
        for s in slices:
            hit = [i for i in range(self.slice_count) if self.matches(s, api_version, i)]
            if not hit:
                return False
            matched.add(hit[0])
        return len(matched) == self.slice_count

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
    if device.capacity:
        body["capacity"] = {k: capacity_json(v) for k, v in device.capacity.items()}
    if device.allow_multiple_allocations:
        body["allowMultipleAllocations"] = True
    if api_version == "v1beta1":
        return {"name": device.name, "basic": body}
    return {"name": device.name, **body}


def capacity_json(capacity: Capacity) -> dict[str, Any]:
    body: dict[str, Any] = {"value": str(capacity.value)}
    if capacity.request_policy is not None:
        body["requestPolicy"] = request_policy_json(capacity.request_policy)
    return body


def request_policy_json(policy: RequestPolicy) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if policy.default is not None:
        body["default"] = str(policy.default)
    valid_range = {
        key: str(value)
        for key, value in (("min", policy.minimum), ("step", policy.step))
        if value is not None
    }
    if valid_range:
        body["validRange"] = valid_range
    return body


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


def split_pool(
    slices: Sequence[Mapping[str, Any]], pool_name: str
) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """Our pool's slices, newest generation first (then by name), and all the others."""
    ours = [s for s in slices if ((s.get("spec") or {}).get("pool") or {}).get("name") == pool_name]
    ours.sort(key=lambda s: (-pool_generation(s), object_name(s)))
    others = [s for s in slices if all(s is not o for o in ours)]
    return ours, others


def object_name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))
