"""Benchmark: the DRA chain's cluster-side latencies, real kube-apiserver + kube-scheduler v1.35.4.

- ``allocate``: a pod using a 4-CPU same-NUMA claim created, until the real scheduler has
  written the claim's ``status.allocation`` against the slice our publisher wrote (the
  scheduler's queue, its DynamicResources plugin and two API writes; our part is the slice).
- ``wipe_repair``: our ResourceSlice deleted (as kubelet's start-up wipe does), until the
  publisher has a slice with the same devices back — the issue's target is ≤ 1 s.

Both are observed by polling the apiserver every ``POLL`` seconds, so the figures carry up
to that much resolution error. The publisher is the daemon's ``SlicePublisher`` with its
production settings, in-process; the devices are topology-aware's for the synthetic n4c16
machine (CPU 0 reserved). Run ``python -m tests.bench_dra_chain [n]`` or ``nox -s bench``.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import trio

from nri_resmgr.dra.kubeletplugin.devices import Device
from nri_resmgr.dra.kubeletplugin.publisher import SlicePublisher, resource_slices
from nri_resmgr.kube import KubeClient
from nri_resmgr.kube.resources import NAMESPACES, NODES, PODS, RESOURCE_CLAIMS
from tests.dra import chain
from tests.dra.scheduler import schedulable_node, start_scheduler
from tests.kube.apiserver import start_apiserver

DRIVER = "bench-chain.nri.io"
POLL = 0.002
SLICES = resource_slices("v1")
SLOW, SLOW_SAMPLES = 5.0, 3  # a repair that waits for a periodic resync: a few samples do

__all__ = ["bench_chain", "rows"]


def devices() -> list[Device]:
    """n4c16 with CPU 0 reserved: 4 CPUs per NUMA node, node 0 has 3 left."""
    return [
        Device(f"cpu{cpu}", {"cpuID": cpu, "coreID": cpu & ~1, "numaNode": cpu // 4,
                             "resource.kubernetes.io/numaNode": cpu // 4})
        for cpu in range(1, 16)
    ]  # fmt: skip


async def bench_chain(n: int = 20) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-chain-") as tmp:
        server = await trio.to_thread.run_sync(start_apiserver, Path(tmp))
        try:
            scheduler = await trio.to_thread.run_sync(
                start_scheduler, server, Path(tmp) / "scheduler.log"
            )
            try:
                async with KubeClient(server.config()) as client:
                    return await _measure(client, n)
            finally:
                scheduler.stop()
        finally:
            server.shutdown()


async def _measure(client: KubeClient, n: int) -> dict[str, Any]:
    ns, node = "bench", f"bench-node-{uuid.uuid4().hex[:6]}"
    await client.create(NAMESPACES, {"metadata": {"name": ns}})
    await schedulable_node(client, node)
    await client.create(chain.DEVICE_CLASSES, chain.device_class(DRIVER))
    published = devices()

    async def current() -> list[Device]:
        return published

    publisher = SlicePublisher(client, current, DRIVER, node)
    async with trio.open_nursery() as nursery:
        await nursery.start(publisher.run)
        await _slice_other_than(client, node, "")
        allocate = [await _allocate_once(client, ns, i) for i in range(n)]
        repair: list[float] = []
        while len(repair) < (n if not repair or max(repair) < SLOW else SLOW_SAMPLES):
            repair.append(await _wipe_once(client, node))
        nursery.cancel_scope.cancel()
    await client.delete(NODES, node)
    return {
        "name": "dra_chain",
        "samples": n,
        "poll_ms": POLL * 1000,
        "allocate_ms": _summary(allocate),
        "wipe_repair_ms": _summary(repair),
    }


async def _allocate_once(client: KubeClient, ns: str, i: int) -> float:
    name = f"c{i}"
    await client.create(RESOURCE_CLAIMS, chain.claim(name, DRIVER, 4, f"{DRIVER}/numaNode"), ns)
    started = time.perf_counter()
    await client.create(PODS, chain.pod(f"p{i}", name, 4), ns)
    with trio.fail_after(30):
        while not ((await client.get(RESOURCE_CLAIMS, name, ns)).get("status") or {}).get(
            "allocation"
        ):
            await trio.sleep(POLL)
    elapsed = time.perf_counter() - started
    await chain.release(client, ns, f"p{i}", name)
    return elapsed


async def _wipe_once(client: KubeClient, node: str) -> float:
    [current] = await _slices(client, node)
    name = current["metadata"]["name"]
    started = time.perf_counter()
    await client.delete(SLICES, name)
    with trio.fail_after(60):
        await _slice_other_than(client, node, name)
    return time.perf_counter() - started


async def _slice_other_than(client: KubeClient, node: str, name: str) -> dict[str, Any]:
    while True:
        for s in await _slices(client, node):
            if s["metadata"]["name"] != name and s["spec"].get("devices"):
                return s
        await trio.sleep(POLL)


async def _slices(client: KubeClient, node: str) -> list[dict[str, Any]]:
    found = await client.list(SLICES, field_selector=f"spec.nodeName={node},spec.driver={DRIVER}")
    return list(found.items)


def _summary(seconds: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in seconds)
    return {
        "median": round(statistics.median(ms), 1),
        "p90": round(ms[min(len(ms) - 1, int(len(ms) * 0.9))], 1),
        "max": round(ms[-1], 1),
    }


def rows(d: dict[str, Any]) -> Iterator[str]:
    """Report lines for ``tests.bench`` (``d`` is ``bench_chain``'s result or unavailable)."""
    yield ""
    yield "| DRA chain (real apiserver + kube-scheduler) | median (ms) | p90 (ms) | max (ms) |"
    yield "|---|---:|---:|---:|"
    for key, title in (("allocate_ms", "pod created → claim allocated"),
                       ("wipe_repair_ms", "slice deleted → slice back")):  # fmt: skip
        s = d.get(key)
        if s is None:
            yield f"| {title}: unavailable: {d.get('unavailable', 'not run')} | | | |"
        else:
            yield f"| {title} | {s['median']} | {s['p90']} | {s['max']} |"


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    result = trio.run(partial(bench_chain, n))
    print(result)
    print("\n".join(rows(result)))


if __name__ == "__main__":
    main()
