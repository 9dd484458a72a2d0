"""The fleet scenarios, in order, on one control plane: start-up of all N agents at once, a
steady window, a group config change, an API server restart with a change made meanwhile.

Every figure is read from the API server's /metrics (counts) or from the agents (whether
each has applied and reported a generation); times are wall clock on whatever machine runs
it, reported, never asserted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import trio

from tests.fleet import budgets, metrics
from tests.fleet.cluster import POLICY, Cluster, admin_client, running_cluster
from tests.fleet.metrics import RequestKey, Samples
from tests.fleet.workers import NotReached, Workers

SETTLE = 5.0
"""Seconds a window stays open after its goal is reached, for the requests that follow it."""
CPU_VALUES = ("1", "750m")
"""The reserved CPU the config change switches to (the chart's default is 750m)."""

Check = Callable[[list[dict[str, Any]]], bool]


def ready(agents: list[dict[str, Any]], generation: int | None = None) -> bool:
    """Every agent applied a configuration (``generation`` if given), reported it, published
    its slices and its NodeResourceTopology, and none failed."""
    return all(
        a["error"] is None
        and a["applied"] is not None
        and a["reported"] == a["applied"]
        and (generation is None or a["applied"] == generation)
        and a["slices"]
        and a["nrt_writes"] > 0
        for a in agents
    )


def reported(generation: int) -> Check:
    return lambda agents: all(a["applied"] == a["reported"] == generation for a in agents)


class Run:
    def __init__(self, cluster: Cluster, workers: Workers, agents: int) -> None:
        self.cluster = cluster
        self.workers = workers
        self.agents = agents
        self.api = cluster.admin
        self.timeout_base = 120.0

    def scrape(self) -> Samples:
        return metrics.scrape(self.api)

    def window(
        self, before: Samples, after: Samples, harness: dict[RequestKey, int] | None = None
    ) -> dict[str, Any]:
        """A window's figures; ``harness`` lists the harness' own requests in it."""
        window = metrics.delta(after, before)
        counts = metrics.requests(window)
        for key, n in (harness or {}).items():
            counts[key] = counts.get(key, 0) - n
        counts = {k: v for k, v in counts.items() if v}
        return {
            "requests": {" ".join(k): v for k, v in sorted(counts.items())},
            "by_verb_resource": metrics.by_verb_resource(counts),
            "by_code": metrics.by_code(counts),
            "total": sum(counts.values()),
            "per_node": round(sum(counts.values()) / self.agents, 3),
            "p99_mutating_s": metrics.latency_p99(window, metrics.MUTATING),
            "p99_read_s": metrics.latency_p99(window, metrics.READING),
            "bytes": metrics.bytes_moved(window),
            "rejected_429": metrics.rejected(window),
            "flow_schemas": metrics.dispatched_by_flow_schema(window),
            "server_closed_watches": metrics.server_closed_watches(after, before),
        }

    def timeout(self) -> float:
        return self.timeout_base + self.agents * 1.0

    def startup(self) -> dict[str, Any]:
        before = self.scrape()
        started = time.monotonic()
        self.workers.start()
        try:
            self.workers.wait_until(ready, timeout=self.timeout())
        except NotReached as exc:
            return self.incomplete(before, exc)
        time.sleep(SETTLE)
        result = self.window(before, self.scrape())
        result["seconds_until_all_ready"] = round(time.monotonic() - started - SETTLE, 1)
        result["watch_reopens"] = budgets.watch_reopens(result, self.agents)
        return result

    def incomplete(self, before: Samples, exc: NotReached) -> dict[str, Any]:
        """The window so far, when not every agent got there: the later scenarios are off."""
        result = self.window(before, self.scrape())
        result["incomplete"] = {"reached": exc.reached, "of": exc.agents, "error": str(exc)}
        return result

    def steady(self, seconds: float) -> dict[str, Any]:
        usage_before = self.workers.report()
        before = self.scrape()
        time.sleep(seconds)
        after = self.scrape()
        usage_after = self.workers.report()
        result = self.window(before, after)
        minutes = seconds / 60
        result["minutes"] = round(minutes, 2)
        result["per_node_per_minute"] = {
            k: round(v / self.agents / minutes, 4) for k, v in result["by_verb_resource"].items()
        }
        result["requests_per_node_per_minute"] = round(result["total"] / self.agents / minutes, 4)
        cpu = sum(a["cpu_seconds"] for a in usage_after) - sum(
            a["cpu_seconds"] for a in usage_before
        )
        result["agent_cpu_ms_per_minute"] = round(cpu * 1000 / self.agents / minutes, 3)
        return result

    def config_change(self, cpu: str) -> dict[str, Any]:
        before = self.scrape()
        started = time.monotonic()
        generation = self.cluster.change_config(cpu)
        try:
            seconds = self.workers.wait_until(reported(generation), timeout=self.timeout())
        except NotReached as exc:
            return self.incomplete(before, exc)
        time.sleep(SETTLE)
        after = self.scrape()
        harness = {("PATCH", "topologyawarepolicies", "", "200"): 1}
        result = self.window(before, after, harness)
        result["generation"] = generation
        result["seconds_until_all_reported"] = round(seconds, 1)
        result["seconds_started_to_reported"] = round(time.monotonic() - started - SETTLE, 1)
        agents = self.workers.agents()
        result["status_conflicts_seen_by_agents"] = sum(a["status_conflicts"] for a in agents)
        result["status_failures_seen_by_agents"] = sum(a["status_failures"] for a in agents)
        cr = self.cluster.config_cr()
        result["config_cr_bytes"] = len(httpx.Response(200, json=cr).content)
        result["config_cr_status_entries"] = len((cr.get("status") or {}).get("nodes") or {})
        return result

    def restart(self, down_seconds: float, cpu: str) -> dict[str, Any]:
        """The agents' API server killed, a change made through a twin, then started again."""
        server = self.cluster.server
        twin = self.cluster.twin or self.cluster.start_twin()
        watches_before = metrics.open_watches(self.scrape())
        self.api.close()
        crashed = time.monotonic()
        trio.run(server.crash_apiserver)  # SIGKILL: no graceful goodbye to the watches
        with admin_client(twin) as via_twin:
            generation = self.cluster.change_config(cpu, via_twin)
        time.sleep(max(0.0, down_seconds - (time.monotonic() - crashed)))
        server.start_apiserver_process()
        server.wait_ready()
        back = time.monotonic()
        self.api = self.cluster.admin = admin_client(server)
        watches_back = None
        all_reported = None
        deadline = back + 300 + self.agents * 0.5
        while (watches_back is None or all_reported is None) and time.monotonic() < deadline:
            now = time.monotonic() - back
            if watches_back is None and metrics.open_watches(self.scrape()) >= watches_before:
                watches_back = round(now, 1)
            if all_reported is None and reported(generation)(self.workers.agents()):
                all_reported = round(now, 1)
            time.sleep(1.0)
        time.sleep(SETTLE)
        result = self.window({}, self.scrape())  # a new process: its counters start at zero
        result.update(
            down_seconds=round(back - crashed, 1),
            watches_before=watches_before,
            seconds_until_watches_back=watches_back,
            seconds_until_change_reported=all_reported,
            generation=generation,
        )
        return result

    def footprint(self) -> dict[str, Any]:
        reports = self.workers.report()
        rss = sum(r["rss_bytes"] for r in reports) - sum(i["rss_bytes"] for i in self.workers.idle)
        samples = self.scrape()
        objects = {
            labels.get("resource", ""): value
            for labels, value in metrics.select(samples, "apiserver_storage_objects")
            if labels.get("resource") in metrics.AGENT_RESOURCES
        }
        return {
            "agent_rss_bytes": round(rss / self.agents),
            "etcd_db_bytes": metrics.total(samples, "apiserver_storage_size_bytes"),
            "storage_objects": objects,
        }


def run_fleet(
    agents: int,
    workdir: Path,
    *,
    processes: int = 2,
    steady_seconds: float = 600.0,
    down_seconds: float = 10.0,
    scenarios: tuple[str, ...] = ("startup", "steady", "change", "restart"),
) -> dict[str, Any]:
    """One control plane, ``agents`` agents, the scenarios in order; returns the figures."""
    result: dict[str, Any] = {"agents": agents, "processes": processes, "policy": POLICY}
    with running_cluster(workdir) as cluster:
        nodes = [f"node-{i:05d}" for i in range(agents)]
        tokens = cluster.register_nodes(nodes)
        plan = {"server": cluster.server.url, "ca_pem": cluster.ca_pem, "namespace": "kube-system",
                "policy": POLICY, "host_root": str(synthetic_machine(workdir))}  # fmt: skip
        workers = Workers.spawn(plan, tokens, processes, workdir)
        try:
            run = Run(cluster, workers, agents)
            result["startup"] = run.startup()
            result["footprint"] = run.footprint()
            steps = {
                "steady": ("steady", lambda: run.steady(steady_seconds)),
                "change": ("config_change", lambda: run.config_change(CPU_VALUES[0])),
                "restart": ("restart", lambda: run.restart(down_seconds, CPU_VALUES[1])),
            }
            for scenario in scenarios:
                if scenario in steps and not any("incomplete" in r for r in result.values()
                                                 if isinstance(r, dict)):  # fmt: skip
                    key, step = steps[scenario]
                    result[key] = step()
            result["footprint_end"] = run.footprint()
        finally:
            workers.stop()
    return result


def synthetic_machine(workdir: Path) -> Path:
    """One sysfs tree every agent reads: 2 sockets x 2 NUMA nodes x 8 cores x 2 threads."""
    from nri_resmgr.sim.synthetic import GIB, Layout, write_sysfs

    layout = Layout(packages=2, nodes_per_die=2, cores_per_node=8, threads=2,
                    node_memory=16 * GIB)  # fmt: skip
    return write_sysfs(workdir / "machine", layout)
