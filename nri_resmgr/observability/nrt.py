"""The node's NodeResourceTopology object (``topology.node.k8s.io/v1alpha2``), kept current.

As nri-plugins' agent does (``pkg/agent/node-resource-topology.go``): one cluster-scoped
object named after the node, attribute ``TopologyPolicy`` = the policy's name, one zone per
policy zone (topology-aware: every pool; balloons: every balloon) with ``cpu`` and ``memory``
capacity/allocatable/available. Written when the zones change, at most once per
``min_interval`` (a burst of container events is one write), never deleted on shutdown
(upstream leaves it too). Off when ``agent.nodeResourceTopology`` is false. API failures are
logged and retried with backoff; they never touch the NRI or DRA paths.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import trio

from nri_resmgr.backoff import Backoff
from nri_resmgr.instrumentation.exports import TopologyZone
from nri_resmgr.kube.client import KubeObject
from nri_resmgr.kube.errors import ApiError, NotFound
from nri_resmgr.kube.resources import ApiResource

log = logging.getLogger(__name__)

NODE_RESOURCE_TOPOLOGIES = ApiResource(
    "topology.node.k8s.io", "v1alpha2", "noderesourcetopologies", namespaced=False,
    kind="NodeResourceTopology",
)  # fmt: skip

DEFAULT_MIN_INTERVAL = 2.0
"""Seconds between writes: the rate limit. Placement changes on every container event, and a
scheduler reading the object needs seconds-fresh data, not every intermediate state."""


class NrtApi(Protocol):
    async def get(self, resource: ApiResource, name: str) -> KubeObject: ...
    async def create(self, resource: ApiResource, obj: KubeObject) -> KubeObject: ...
    async def replace(self, resource: ApiResource, obj: KubeObject) -> KubeObject: ...


class Source(Protocol):
    """Where the exporter reads what to publish (the resource manager)."""

    def zones(self) -> tuple[str, list[TopologyZone]]:
        """The policy's name and its zones, as of now."""

    def enabled(self) -> bool:
        """agent.nodeResourceTopology of the configuration in force."""


def nrt_body(policy: str, zones: Sequence[TopologyZone]) -> KubeObject:
    """The object's content (without metadata): what is compared and written."""
    return {
        "attributes": [{"name": "TopologyPolicy", "value": policy}],
        "zones": [_zone(z) for z in zones],
    }


def _zone(z: TopologyZone) -> dict[str, Any]:
    out: dict[str, Any] = {"name": z.name, "type": z.type}
    if z.parent:
        out["parent"] = z.parent
    out["resources"] = [
        {"name": r.name, "capacity": r.capacity, "allocatable": r.allocatable,
         "available": r.available}
        for r in z.resources
    ]  # fmt: skip
    if z.attributes:
        out["attributes"] = [{"name": k, "value": v} for k, v in z.attributes]
    return out


class NrtExporter:
    """The daemon service; see ``nri_resmgr.daemon`` for the service contract."""

    name = "node-resource-topology"

    def __init__(
        self,
        client: NrtApi,
        node_name: str,
        source: Source,
        changed: Callable[[], Any],
        *,
        min_interval: float = DEFAULT_MIN_INTERVAL,
        backoff: Backoff | None = None,
    ) -> None:
        self._client = client
        self.node_name = node_name
        self._source = source
        self._changed = changed
        self.min_interval = min_interval
        self._backoff = backoff or Backoff(initial=1.0, maximum=60.0)
        self._published: KubeObject | None = None
        self._scope: trio.CancelScope | None = None
        self.writes = 0
        """Objects created or replaced so far (for logs and tests)."""

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with trio.CancelScope() as self._scope:
            task_status.started()
            while True:
                await self._publish_until_done()
                await self._changed()
                await trio.sleep(self.min_interval)

    async def stop(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    async def _publish_until_done(self) -> None:
        while True:
            try:
                await self.publish()
            except ApiError as exc:
                # A 404 on create: the API has no such resource (the CRD is not installed).
                hint = " (is the NodeResourceTopology CRD installed?)" if exc.status == 404 else ""
                log.warning("NodeResourceTopology %s: %s%s; retrying", self.node_name, exc, hint)
                await self._backoff.sleep()
                continue
            self._backoff.reset()
            return

    async def publish(self) -> bool:
        """Write the object if the zones differ from what was last written; True if written."""
        if not self._source.enabled():
            return False
        policy, zones = self._source.zones()
        if not zones:
            return False
        body = nrt_body(policy, zones)
        if body == self._published:
            return False
        try:
            current = await self._client.get(NODE_RESOURCE_TOPOLOGIES, self.node_name)
        except NotFound:
            current = None
        obj: KubeObject = {
            "apiVersion": NODE_RESOURCE_TOPOLOGIES.api_version,
            "kind": NODE_RESOURCE_TOPOLOGIES.kind,
            "metadata": {"name": self.node_name},
            **body,
        }
        if current is None:
            await self._client.create(NODE_RESOURCE_TOPOLOGIES, obj)
        else:
            version = (current.get("metadata") or {}).get("resourceVersion", "")
            obj["metadata"]["resourceVersion"] = version
            await self._client.replace(NODE_RESOURCE_TOPOLOGIES, obj)
        self._published = body
        self.writes += 1
        log.info("NodeResourceTopology %s: %d zones written", self.node_name, len(zones))
        return True


__all__ = ["DEFAULT_MIN_INTERVAL", "NODE_RESOURCE_TOPOLOGIES", "NrtExporter", "nrt_body"]
