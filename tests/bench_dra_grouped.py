"""Benchmark: grouped CPU devices against the real kube-apiserver + kube-scheduler v1.37.2.

topology-aware's grouped devices (``policy.dra_devices()`` in grouped mode, one per NUMA node
with capacity ``cpu``) for n4c128 (4 NUMA nodes of 32, CPU 0 reserved, nodes 1-3 grouped) and
s8c4k (8 NUMA nodes of 512, 4,096 CPUs, nodes 1-7 grouped), published by the daemon's
``SlicePublisher``. Per sample: a claim for 1, 4, 16, 32 CPUs or a whole NUMA node
(``capacity.requests``, a CEL selector on a random node) and its pod created, until the
scheduler has written the allocation (polled every ``POLL`` s); then released as kube-
controller-manager would. And a claim that cannot fit (one CPU more than a node has): until the
pod is marked Unschedulable (per-CPU devices cost the scheduler's 10 s allocation timeout
there).

Run ``python -m tests.bench_dra_grouped [n]`` or ``nox -s bench``.
"""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import trio

from nri_resmgr.config.models import DraConfig
from nri_resmgr.dra.cpu.driver import slice_device
from nri_resmgr.dra.kubeletplugin.devices import Device
from nri_resmgr.dra.kubeletplugin.publisher import SlicePublisher
from nri_resmgr.kube import KubeClient
from nri_resmgr.kube.resources import NAMESPACES, NODES, PODS, RESOURCE_CLAIMS
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from nri_resmgr.resmgr.policy import PolicyEnv
from nri_resmgr.sim.machine import MACHINES as LAYOUTS
from nri_resmgr.sim.synthetic import write_sysfs
from tests.dra import chain
from tests.dra.scheduler import schedulable_node, start_scheduler
from tests.kube.apiserver import start_apiserver
from tests.policies.workload import topology_spec

VERSION = "v1.37.2"
DRIVER = "bench-grouped.nri.io"
POLL = 0.002
MACHINES = {"n4c128": "32-127", "s8c4k": "512-4095"}
"""Grouped CPUs: every NUMA node but node 0 (CPU 0 reserved there, natives run there)."""

__all__ = ["bench_grouped", "rows"]


def grouped_devices(machine: str, root: Path) -> list[Device]:
    write_sysfs(root, LAYOUTS[machine])
    dra = DraConfig(enabled=True, cpu_device_mode="grouped", grouped_cpus=MACHINES[machine])
    policy = TopologyAwarePolicy()
    policy.setup(topology_spec(dra=dra), PolicyEnv(host_root=str(root)))
    return [slice_device(d) for d in policy.dra_devices()]


async def bench_grouped(n: int = 20) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-grouped-") as tmp:
        server = await trio.to_thread.run_sync(start_apiserver, Path(tmp), VERSION)
        try:
            scheduler = await trio.to_thread.run_sync(
                start_scheduler, server, Path(tmp) / "scheduler.log", VERSION
            )
            try:
                async with KubeClient(server.config()) as client:
                    await client.create(NAMESPACES, {"metadata": {"name": "bench"}})
                    await client.create(chain.DEVICE_CLASSES, chain.device_class(DRIVER))
                    out: dict[str, Any] = {"name": "dra_grouped", "samples": n}
                    for machine in MACHINES:
                        devices = grouped_devices(machine, Path(tmp) / machine)
                        out[machine] = await _measure(client, machine, devices, n)
                    return out
            finally:
                scheduler.stop()
        finally:
            server.shutdown()


async def _measure(
    client: KubeClient, machine: str, devices: list[Device], n: int
) -> dict[str, Any]:
    node = f"bench-{machine}"
    cpus = sum(d.capacity["cpu"].value for d in devices)
    await schedulable_node(client, node, cpus=cpus + 1)

    async def current() -> list[Device]:
        return devices

    publisher = SlicePublisher(client, current, DRIVER, node)
    whole = min(d.capacity["cpu"].value for d in devices)
    rng = random.Random(1)
    result: dict[str, Any] = {"devices": len(devices), "cpus": cpus}
    async with trio.open_nursery() as nursery:
        await nursery.start(publisher.run)
        sizes = list(dict.fromkeys([1, 4, 16, 32, whole]))
        samples = {size: [] for size in sizes}  # type: dict[int, list[float]]
        for i in range(n):
            for size in sizes:
                numa = rng.choice([int(d.attributes["numaNode"]) for d in devices])
                samples[size].append(await _allocate(client, f"{machine}-{i}-{size}", size, numa))
        result["allocate_ms"] = {str(size): _summary(s) for size, s in samples.items()}
        everything = [x for s in samples.values() for x in s]
        result["allocate_all_ms"] = _summary(everything)
        result["whole_numa_cpus"] = whole
        result["unfit_refused_ms"] = _summary(
            [await _refused(client, f"{machine}-big-{i}", whole + 1) for i in range(min(n, 5))]
        )
        nursery.cancel_scope.cancel()
    await client.delete(NODES, node)
    return result


def claim(name: str, cpus: int, numa: int | None) -> dict[str, Any]:
    selectors = [] if numa is None else [{"cel": {"expression":
        f'device.attributes["{DRIVER}"].numaNode == {numa}'}}]  # fmt: skip
    return {
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "cpus", "exactly": {
            "deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 1,
            "selectors": selectors, "capacity": {"requests": {"cpu": str(cpus)}}}}]}},
    }  # fmt: skip


async def _allocate(client: KubeClient, name: str, cpus: int, numa: int) -> float:
    await client.create(RESOURCE_CLAIMS, claim(name, cpus, numa), "bench")
    started = time.perf_counter()
    await client.create(PODS, chain.pod(name, name, cpus), "bench")
    with trio.fail_after(30):
        while not ((await client.get(RESOURCE_CLAIMS, name, "bench")).get("status") or {}).get(
            "allocation"
        ):
            await trio.sleep(POLL)
    elapsed = time.perf_counter() - started
    await chain.release(client, "bench", name, name)
    return elapsed


async def _refused(client: KubeClient, name: str, cpus: int) -> float:
    await client.create(RESOURCE_CLAIMS, claim(name, cpus, None), "bench")
    started = time.perf_counter()
    await client.create(PODS, chain.pod(name, name, 1), "bench")
    with trio.fail_after(30):
        while not _unschedulable(await client.get(PODS, name, "bench")):
            await trio.sleep(POLL)
    elapsed = time.perf_counter() - started
    await chain.release(client, "bench", name, name)
    return elapsed


def _unschedulable(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _summary(seconds: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in seconds)
    return {
        "median": round(statistics.median(ms), 1),
        "p99": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 1),
        "max": round(ms[-1], 1),
    }


def rows(d: dict[str, Any]) -> Iterator[str]:
    """Report lines for ``tests.bench`` (``d`` is ``bench_grouped``'s result or unavailable)."""
    yield ""
    yield f"| DRA grouped devices (kube-scheduler {VERSION}) | median (ms) | p99 (ms) | max (ms) |"
    yield "|---|---:|---:|---:|"
    if "unavailable" in d:
        yield f"| unavailable: {d['unavailable']} | | | |"
        return
    for machine in MACHINES:
        m = d.get(machine) or {}
        for size, s in (m.get("allocate_ms") or {}).items():
            whole = " (whole NUMA node)" if int(size) == m.get("whole_numa_cpus") else ""
            title = f"{machine}: {size}-CPU claim{whole} → allocated"
            yield f"| {title} | {s['median']} | {s['p99']} | {s['max']} |"
        if m.get("unfit_refused_ms"):
            s = m["unfit_refused_ms"]
            title = f"{machine}: claim that cannot fit → Unschedulable"
            yield f"| {title} | {s['median']} | {s['p99']} | {s['max']} |"


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    result = trio.run(partial(bench_grouped, n))
    print(result)
    print("\n".join(rows(result)))


if __name__ == "__main__":
    main()
