"""``python -m tests.fleet.status_storm [--nodes 1000] [--limit SECONDS]``: the shared config
CR's status when every node writes its entry into it, as nri-plugins' nodes (and
nri-resmgr's before the fleet changes) do, measured on a real kube-apiserver + etcd
(docs/fleet.md). The writers get ``--limit`` seconds; how far they came is reported.

N writers (the agent's own StatusWriter, its merge patch on the status subresource, one
client and node name each) report Success into one CR at once, against a CRD without
nri-resmgr's bounds on ``status.nodes`` (as nri-plugins' CRD is). Measured: the object's size
with N entries, the write conflicts the API server resolved (etcd update attempts beyond one
per write: a merge patch without a resourceVersion is retried inside the API server against
the newest object, so clients never see a 409), what the clients saw (codes, retries), and
the watch traffic each write causes: every node of the group watches the CR, so the harness
counts the events one watcher received and multiplies by N. The full fan-out is not
replayed: N watchers receiving N writes of up to N entries is N**2 events, which this
machine does not serve at N = 1,000 (the before-run at 200 agents did not converge).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from nri_resmgr.agent.status import StatusWriter, success_entry
from nri_resmgr.kube import ClusterConfig, KubeClient
from nri_resmgr.kube.auth import StaticToken
from nri_resmgr.kube.resources import TOPOLOGY_AWARE_POLICIES
from nri_resmgr.kube.watch import EventType
from tests.fleet import metrics
from tests.fleet.cluster import KIND_PATHS, NAMESPACE, Cluster, running_cluster
from tests.kube.apiserver import ADMIN_TOKEN


def unbounded(crd: dict[str, Any]) -> dict[str, Any]:
    """The CRD without nri-resmgr's bounds on status.nodes (nri-plugins' has none)."""
    crd = copy.deepcopy(crd)
    for version in crd["spec"]["versions"]:
        nodes = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["nodes"]
        nodes.pop("maxProperties", None)
        nodes.pop("x-kubernetes-validations", None)
    return crd


def loosen_crd(cluster: Cluster) -> None:
    path = KIND_PATHS["CustomResourceDefinition"]
    crd = next(d for d in cluster.rendered if d["kind"] == "CustomResourceDefinition")
    current = cluster.admin.get(f"{path}/{crd['metadata']['name']}").json()
    body = unbounded(crd) | {"metadata": current["metadata"]}
    cluster.admin.put(f"{path}/{crd['metadata']['name']}", json=body).raise_for_status()


async def storm(cluster: Cluster, nodes: int, limit: float) -> dict[str, Any]:
    config = ClusterConfig(server=cluster.server.url, ca_pem=cluster.ca_pem.encode(),
                           token=StaticToken(ADMIN_TOKEN))  # fmt: skip
    async with KubeClient(config, timeout=60) as watcher_client:
        watch = watcher_client.watch(TOPOLOGY_AWARE_POLICIES, NAMESPACE, name="default")
        seen = {"events": 0, "bytes": 0, "last_entries": 0}
        async with trio.open_nursery() as nursery:

            async def follow() -> None:
                async with watch:
                    async for event in watch:
                        if event.type is EventType.MODIFIED and event.object:
                            seen["events"] += 1
                            seen["bytes"] += len(json.dumps(event.object))
                            status = event.object.get("status") or {}
                            seen["last_entries"] = len(status.get("nodes") or {})

            nursery.start_soon(follow)
            await trio.sleep(1)
            writers = [await write_one(config, i) for i in range(nodes)]
            started = time.monotonic()
            with trio.move_on_after(limit) as bounded:
                async with trio.open_nursery() as writes:
                    for writer in writers:
                        writes.start_soon(writer.flush)
            seconds = time.monotonic() - started
            written = sum(1 for w in writers if "default" in w.written)
            with trio.move_on_after(60):
                while seen["last_entries"] < nodes:
                    await trio.sleep(0.5)
            nursery.cancel_scope.cancel()
    return {
        "seconds_until_all_written": None if bounded.cancelled_caught else round(seconds, 1),
        "writers_done": written,
        "seconds_writing": round(seconds, 1),
        "client_failures": sum(w.failures for w in writers),
        "client_conflicts": sum(w.conflicts for w in writers),
        "watch_events_one_watcher": seen["events"],
        "watch_bytes_one_watcher": seen["bytes"],
    }


async def write_one(config: ClusterConfig, index: int) -> StatusWriter:
    client = KubeClient(config, timeout=60)  # closed with the process: one per "node"
    writer = StatusWriter(client, TOPOLOGY_AWARE_POLICIES, NAMESPACE, f"node-{index:05d}")
    writer.set("default", success_entry(1))
    return writer


def measure(nodes: int, workdir: Path, limit: float) -> dict[str, Any]:
    with running_cluster(workdir) as cluster:
        loosen_crd(cluster)
        before = metrics.scrape(cluster.admin)
        result = trio.run(storm, cluster, nodes, limit)
        window = metrics.delta(metrics.scrape(cluster.admin), before)
        counts = metrics.requests(window, frozenset({"topologyawarepolicies"}))
        attempts = metrics.total(window, "etcd_requests_total", operation="update",
                                 resource="topologyawarepolicies")  # fmt: skip
        patches = sum(n for (verb, _r, sub, code), n in counts.items()
                      if verb == "PATCH" and sub == "status" and code == "200")  # fmt: skip
        cr = cluster.config_cr()
        size = len(json.dumps(cr))
        per_watcher = result["watch_bytes_one_watcher"]
        return {
            "nodes": nodes,
            **result,
            "status_patches": {f"{v} {sub} {code}": n for (v, _r, sub, code), n in counts.items()},
            "etcd_update_attempts": attempts,
            "conflicts_resolved_by_the_api_server": attempts - patches,
            "cr_bytes": size,
            "cr_entries": len((cr.get("status") or {}).get("nodes") or {}),
            "fan_out_events_if_every_node_watches": result["watch_events_one_watcher"] * nodes,
            "fan_out_bytes_if_every_node_watches": per_watcher * nodes,
        }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.fleet.status_storm", description=__doc__)
    p.add_argument("--nodes", type=int, nargs="+", default=[1000])
    p.add_argument("--out", type=Path, default=Path("fleet-results"))
    p.add_argument("--limit", type=float, default=900.0,
                   help="seconds the writers get; the figures say how far they came")  # fmt: skip
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for nodes in args.nodes:
        with tempfile.TemporaryDirectory(prefix=f"fleet-status-{nodes}-") as tmp:
            result = measure(nodes, Path(tmp), args.limit)
        (args.out / f"status-storm-{nodes}.json").write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
