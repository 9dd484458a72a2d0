"""API resource descriptors and the URL paths they map to."""

from __future__ import annotations

from urllib.parse import quote

import attrs


@attrs.frozen
class ApiResource:
    """One REST resource type: ``group`` is "" for the core API."""

    group: str
    version: str
    plural: str
    namespaced: bool
    kind: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def collection_path(self, namespace: str | None) -> str:
        """Path of the collection; ``namespace`` None lists a namespaced type across namespaces."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace is not None:
            if not self.namespaced:
                raise ValueError(f"{self.plural} is cluster-scoped: namespace must be None")
            base += f"/namespaces/{_segment(namespace, 'namespace')}"
        return f"{base}/{self.plural}"

    def object_path(self, name: str, namespace: str | None, subresource: str | None = None) -> str:
        """Path of one object; namespaced types need a namespace."""
        if self.namespaced and not namespace:
            raise ValueError(f"{self.plural} is namespaced: a namespace is required")
        path = f"{self.collection_path(namespace)}/{_segment(name, 'name')}"
        if subresource:
            path += f"/{_segment(subresource, 'subresource')}"
        return path


def _segment(value: str, what: str) -> str:
    if not value or "/" in value:
        raise ValueError(f"invalid {what} {value!r}: must be non-empty and contain no '/'")
    return quote(value, safe="")


NODES = ApiResource("", "v1", "nodes", namespaced=False, kind="Node")
NAMESPACES = ApiResource("", "v1", "namespaces", namespaced=False, kind="Namespace")
PODS = ApiResource("", "v1", "pods", namespaced=True, kind="Pod")
CONFIG_MAPS = ApiResource("", "v1", "configmaps", namespaced=True, kind="ConfigMap")
EVENTS = ApiResource("", "v1", "events", namespaced=True, kind="Event")
CUSTOM_RESOURCE_DEFINITIONS = ApiResource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", namespaced=False,
    kind="CustomResourceDefinition",
)  # fmt: skip

RESOURCE_SLICES = ApiResource(
    "resource.k8s.io", "v1", "resourceslices", namespaced=False, kind="ResourceSlice"
)
RESOURCE_SLICES_V1BETA1 = ApiResource(
    "resource.k8s.io", "v1beta1", "resourceslices", namespaced=False, kind="ResourceSlice"
)
RESOURCE_CLAIMS = ApiResource(
    "resource.k8s.io", "v1", "resourceclaims", namespaced=True, kind="ResourceClaim"
)

CONFIG_GROUP = "config.nri"
CONFIG_VERSION = "v1alpha1"
TOPOLOGY_AWARE_POLICIES = ApiResource(
    CONFIG_GROUP, CONFIG_VERSION, "topologyawarepolicies", namespaced=True,
    kind="TopologyAwarePolicy",
)  # fmt: skip
BALLOONS_POLICIES = ApiResource(
    CONFIG_GROUP, CONFIG_VERSION, "balloonspolicies", namespaced=True, kind="BalloonsPolicy"
)
TEMPLATE_POLICIES = ApiResource(
    CONFIG_GROUP, CONFIG_VERSION, "templatepolicies", namespaced=True, kind="TemplatePolicy"
)

CONFIG_RESOURCES_BY_KIND: dict[str, ApiResource] = {
    r.kind: r for r in (TOPOLOGY_AWARE_POLICIES, BALLOONS_POLICIES, TEMPLATE_POLICIES)
}
