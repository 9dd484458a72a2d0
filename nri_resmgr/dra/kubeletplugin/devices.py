"""A device as a ResourceSlice publishes it: what the driver offers, free of any API version.

The kubelet-plugin layer knows devices only as the API does (a name, attributes, capacities,
whether several claims may share it); what a device stands for on the node is the driver's.
Attribute and capacity names are unqualified (filed under the driver name) or
``<domain>/<name>``.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

AttributeValue = str | int | bool
MetadataValue = AttributeValue | tuple[int, ...]
"""A device metadata attribute (KEP-5304): a slice attribute's type, or a list of numbers
(``ints``; metadata files go through no API server, so the alpha list type is safe there)."""


@attrs.frozen
class RequestPolicy:
    """``capacity.<name>.requestPolicy`` (consumable capacity): how the scheduler rounds what
    a claim asks for. ``minimum`` and ``step`` make ``validRange`` (requests are rounded up to
    ``minimum + k * step``); ``default`` is what a request that names no amount consumes
    (unset: the whole capacity)."""

    minimum: int | None = None
    step: int | None = None
    default: int | None = None


@attrs.frozen
class Capacity:
    value: int
    request_policy: RequestPolicy | None = None


@attrs.frozen
class Device:
    name: str
    attributes: Mapping[str, AttributeValue] = attrs.field(factory=dict)
    capacity: Mapping[str, Capacity] = attrs.field(factory=dict)
    allow_multiple_allocations: bool = False
    """Consumable capacity: several claims share the device, each consuming part of its
    capacity (``DRAConsumableCapacity``, on by default from Kubernetes 1.36)."""
