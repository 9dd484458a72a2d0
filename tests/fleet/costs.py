"""``python -m tests.fleet.costs [--nodes N]``: what one agent request of each kind costs the
API server when the cluster holds N nodes' objects, for the model in docs/fleet.md.

The fleet harness counts requests; this prices them. With N Nodes and N ResourceSlices (64
devices each, as the harness' agents publish) in a real kube-apiserver + etcd with the chart
applied, it sends each request kind the agent sends (before and after the fleet changes) a
few times as one agent (the chart's ServiceAccount, a token bound to the agent's pod, so the
chart's FlowSchema classifies it) and reads from /metrics, per request: the objects the API
server scanned to answer it (``apiserver_cache_list_fetched_objects_total``, and the
storage one when it went to etcd), the seats priority
and fairness reserved for it (``apiserver_flowcontrol_work_estimated_seats``) and the bytes
it sent. These are counts, not times.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

from tests.fleet import metrics
from tests.fleet.cluster import ACCOUNT, NAMESPACE, POLICY, running_cluster

DRIVER = f"{POLICY}.nri.io"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
REPEAT = 10


def slice_body(node: str, uid: str) -> dict[str, Any]:
    devices = [
        {"name": f"cpu{i}", "attributes": {"numa": {"int": i // 16}, "core": {"int": i // 2}}}
        for i in range(64)
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"generateName": f"{node}-{DRIVER}-",
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node,
                                          "uid": uid, "controller": True}]},
        "spec": {"driver": DRIVER, "nodeName": node, "devices": devices,
                 "pool": {"name": node, "generation": 0, "resourceSliceCount": 1}},
    }  # fmt: skip


def requests_of_an_agent(node: str) -> dict[str, tuple[str, str, dict[str, str]]]:
    """name -> (method, path, params): what an agent asks, before and after."""
    by_node = f"spec.nodeName={node},spec.driver={DRIVER}"
    crs = f"/apis/config.nri/v1alpha1/namespaces/{NAMESPACE}/topologyawarepolicies"
    watch_list = {"watch": "true", "sendInitialEvents": "true", "allowWatchBookmarks": "true",
                  "resourceVersionMatch": "NotOlderThan", "timeoutSeconds": "1"}  # fmt: skip
    return {
        "before: LIST own slices (30 s resync)": ("GET", SLICES, {"fieldSelector": by_node}),
        "before: GET own Node (each sync)": ("GET", f"/api/v1/nodes/{node}", {}),
        "before: LIST a config CR by name": (
            "GET",
            crs,
            {"fieldSelector": "metadata.name=default"},
        ),
        "after: watch-list own slices": ("GET", SLICES, {"fieldSelector": by_node, **watch_list}),
        "after: watch-list own Node": (
            "GET",
            "/api/v1/nodes",
            {"fieldSelector": f"metadata.name={node}", **watch_list},
        ),
        "after: watch-list the namespace's config CRs": ("GET", crs, watch_list),
    }


def price(api: httpx.Client, agent: httpx.Client, method: str, path: str,
          params: dict[str, str]) -> dict[str, float]:  # fmt: skip
    before = metrics.scrape(api)
    sent = 0
    for _ in range(REPEAT):
        response = agent.request(method, path, params=params)
        response.raise_for_status()
        sent += len(response.content)
    window = metrics.delta(metrics.scrape(api), before)
    seats = metrics.total(window, "apiserver_flowcontrol_work_estimated_seats_sum",
                          flow_schema=ACCOUNT)  # fmt: skip
    fetched = sum(
        metrics.total(window, name)
        for name in ("apiserver_cache_list_fetched_objects_total",
                     "apiserver_storage_list_fetched_objects_total")
    )  # fmt: skip
    return {"seats": seats / REPEAT, "objects_scanned": fetched / REPEAT,
            "bytes": sent / REPEAT}  # fmt: skip


def measure(nodes: int, workdir: Path) -> dict[str, Any]:
    with running_cluster(workdir) as cluster:
        agent_node = "node-00000"
        token = cluster.register_nodes([agent_node])[agent_node]
        api = cluster.admin
        for i in range(nodes):
            name = f"node-{i:05d}"
            if i == 0:
                node = api.get(f"/api/v1/nodes/{name}").json()
            else:
                node = api.post("/api/v1/nodes", json={"metadata": {"name": name}}).json()
            api.post(SLICES, json=slice_body(name, node["metadata"]["uid"])).raise_for_status()
        server = cluster.server
        agent = httpx.Client(base_url=server.url, verify=server.config().ssl_context(),
                             headers={"Authorization": f"Bearer {token}"}, timeout=60)  # fmt: skip
        with agent:
            return {"nodes": nodes, "requests": {
                name: price(api, agent, *request)
                for name, request in requests_of_an_agent(agent_node).items()
            }}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.fleet.costs", description=__doc__)
    p.add_argument("--nodes", type=int, nargs="+", default=[1000])
    p.add_argument("--out", type=Path, default=Path("fleet-results"))
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for nodes in args.nodes:
        with tempfile.TemporaryDirectory(prefix=f"fleet-costs-{nodes}-") as tmp:
            result = measure(nodes, Path(tmp))
        (args.out / f"costs-{nodes}.json").write_text(json.dumps(result, indent=2) + "\n")
        for name, cost in result["requests"].items():
            scanned, sent = cost["objects_scanned"], cost["bytes"]
            print(f"{nodes} nodes: {name}: {cost['seats']:.1f} seats, {scanned:.0f} objects "
                  f"scanned, {sent:.0f} bytes")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
