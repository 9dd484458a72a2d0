"""The node's NodeResourceTopology object (``topology.node.k8s.io/v1alpha2``), kept current.

As nri-plugins' agent does (``pkg/agent/node-resource-topology.go``): one cluster-scoped
object named after the node, attribute ``TopologyPolicy`` = the policy's name, one zone per
policy zone (topology-aware: every pool; balloons: every balloon) with ``cpu`` and ``memory``
capacity/allocatable/available. Beyond upstream, a policy may add zones and attributes a
NUMA-aware scheduler reads (topology-aware: a ``Node`` zone per NUMA node and
``topologyManagerPolicy``; ``policies.topology_aware.numazones``). Written only when what it
says changes (never on a timer), at most once per ``min_interval`` (a burst of container
events is one write, with the last state), never deleted on shutdown (upstream leaves it
too). Off when ``agent.nodeResourceTopology`` is false. API failures are logged and retried
with backoff; they never touch the NRI or DRA paths.

The top-level attributes also carry the node's configuration report (``set_report``: which
config CR, generation and outcome; ``nri_resmgr.agent.report``), so a configuration change
that changes the zones is one write for both.

Each write is one request whether the object exists or not: a server-side apply of the whole
object (field manager ``nri-resmgr``, forced, so an object another writer left, such as
nri-plugins' agent, is taken over), not a GET followed by a create or a replace.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import trio

from nri_resmgr.backoff import Backoff
from nri_resmgr.errors import Recoverable
from nri_resmgr.instrumentation.exports import TopologyZone
from nri_resmgr.kube.client import KubeObject, PatchType
from nri_resmgr.kube.errors import ApiError
from nri_resmgr.kube.resources import ApiResource

log = logging.getLogger(__name__)

NODE_RESOURCE_TOPOLOGIES = ApiResource(
    "topology.node.k8s.io", "v1alpha2", "noderesourcetopologies", namespaced=False,
    kind="NodeResourceTopology",
)  # fmt: skip

DEFAULT_MIN_INTERVAL = 2.0
"""Seconds between writes: the rate limit. Placement changes on every container event, and a
scheduler reading the object needs seconds-fresh data, not every intermediate state."""
FIELD_MANAGER = "nri-resmgr"


class NrtApi(Protocol):
    async def patch(
        self,
        resource: ApiResource,
        name: str,
        patch: KubeObject,
        namespace: str | None = None,
        *,
        patch_type: PatchType = PatchType.MERGE,
        subresource: str | None = None,
        field_manager: str | None = None,
        force: bool = False,
    ) -> KubeObject: ...


class Source(Protocol):
    """Where the exporter reads what to publish (the resource manager)."""

    def zones(self) -> tuple[str, list[TopologyZone]]:
        """The policy's name and its zones, as of now."""

    def attributes(self) -> Sequence[tuple[str, str]]:
        """The policy's own object attributes (``topologyManagerPolicy``...), as of now."""

    def enabled(self) -> bool:
        """agent.nodeResourceTopology of the configuration in force."""


def nrt_body(
    policy: str,
    zones: Sequence[TopologyZone],
    report: Sequence[tuple[str, str]] = (),
    policy_attributes: Sequence[tuple[str, str]] = (),
) -> KubeObject:
    """The object's content (without metadata): what is compared and written."""
    attributes = [("TopologyPolicy", policy), *policy_attributes, *report]
    return {
        "attributes": [{"name": k, "value": v} for k, v in attributes],
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
    if z.costs:
        out["costs"] = [{"name": k, "value": v} for k, v in z.costs]
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
        self._report: tuple[tuple[str, str], ...] = ()
        self._reported = trio.Event()
        self._scope: trio.CancelScope | None = None
        self.failing = False
        """The last write failed for a reason a retry will not cure (no CRD, no permission)."""
        self.writes = 0
        """Objects written so far (for logs and tests)."""

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with trio.CancelScope() as self._scope:
            task_status.started()
            while True:
                await self._publish_until_done()
                await self._next_change()
                await trio.sleep(self.min_interval)

    @property
    def published(self) -> KubeObject | None:
        """What the last write put into the object (attributes and zones), if any."""
        return self._published

    def exporting(self) -> bool:
        """Whether a report given now will be written: the export is on, has zones to
        write, and its writes go through."""
        return self._source.enabled() and bool(self._source.zones()[1]) and not self.failing

    def set_report(self, attributes: Sequence[tuple[str, str]]) -> None:
        """The node's configuration report, written with the next write (soon)."""
        if tuple(attributes) != self._report:
            self._report = tuple(attributes)
            self._reported.set()

    async def _next_change(self) -> None:
        """Returns when the policy's state or the report changed."""
        async with trio.open_nursery() as nursery:

            async def first(wait: Callable[[], Any]) -> None:
                await wait()
                nursery.cancel_scope.cancel(reason="NRT state or report changed")

            nursery.start_soon(first, self._changed)
            nursery.start_soon(first, self._reported.wait)
        if self._reported.is_set():
            self._reported = trio.Event()

    async def stop(self) -> None:
        if self._scope is not None:
            self._scope.cancel(reason="NRT export stopping")

    async def _publish_until_done(self) -> None:
        while True:
            try:
                await self.publish()
            except ApiError as exc:
                # A 404: the API has no such resource (the CRD is not installed).
                hint = " (is the NodeResourceTopology CRD installed?)" if exc.status == 404 else ""
                log.warning("NodeResourceTopology %s: %s%s; retrying", self.node_name, exc, hint)
                # A busy server (429, 5xx, a timeout) will take the write; a missing CRD or
                # permission will not: only then do reports go elsewhere meanwhile.
                self.failing = not isinstance(exc, Recoverable)
                await self._backoff.sleep()
                continue
            self.failing = False
            self._backoff.reset()
            return

    async def publish(self) -> bool:
        """Write the object if the zones differ from what was last written; True if written."""
        if not self._source.enabled():
            return False
        policy, zones = self._source.zones()
        if not zones:
            return False
        body = nrt_body(policy, zones, self._report, self._source.attributes())
        if body == self._published:
            return False
        obj: KubeObject = {
            "apiVersion": NODE_RESOURCE_TOPOLOGIES.api_version,
            "kind": NODE_RESOURCE_TOPOLOGIES.kind,
            "metadata": {"name": self.node_name},
            **body,
        }
        await self._client.patch(NODE_RESOURCE_TOPOLOGIES, self.node_name, obj,
                                 patch_type=PatchType.APPLY, field_manager=FIELD_MANAGER,
                                 force=True)  # fmt: skip
        self._published = body
        self.writes += 1
        log.info("NodeResourceTopology %s: %d zones written", self.node_name, len(zones))
        return True


__all__ = ["DEFAULT_MIN_INTERVAL", "NODE_RESOURCE_TOPOLOGIES", "NrtExporter", "nrt_body"]
