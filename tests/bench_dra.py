"""Benchmark: NodePrepareResources round trip, grpcio client (as kubelet) to our plugin, while
NRI-like requests keep the manager lock busy.

The client runs all calls from one worker thread and times each with ``perf_counter_ns``, so
the thread hop is not in the figures. Run ``python -m tests.bench_dra [n]`` or call
``bench_prepare(n)`` from ``nox -s bench``.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import grpc
import trio
import trio_asyncio

from nri_resmgr.config.models import DraConfig, TemplateSpec
from nri_resmgr.dra.plugin import KubeletPlugin
from nri_resmgr.resmgr.manager import ResourceManager
from nri_resmgr.resmgr.model import Container, Pod
from nri_resmgr.resmgr.policies.template import TemplatePolicy
from nri_resmgr.resmgr.policy import PolicyEnv
from tests.dra.kubelet_client import KubeletStubs, generate_grpcio_stubs

WARM_UP = 100


async def bench_prepare(n: int = 2000, *, nri_load: bool = True) -> dict[str, Any]:
    """Median and p99 (µs) of ``n`` NodePrepareResources calls (v1), one claim each."""
    with tempfile.TemporaryDirectory(prefix="bench-dra-") as tmp:
        stubs = generate_grpcio_stubs(Path(tmp) / "stubs")
        async with trio_asyncio.open_loop():
            manager = ResourceManager(
                TemplatePolicy(), TemplateSpec(dra=DraConfig(enabled=True)), PolicyEnv("", "n1")
            )
            plugin = KubeletPlugin(
                manager, "template.nri.io", Path(tmp) / "p", Path(tmp) / "r", node_name="n1"
            )
            async with trio.open_nursery() as nursery:
                await plugin.start(nursery)
                load_ops = [0]
                if nri_load:
                    nursery.start_soon(_nri_load, manager, load_ops)
                samples = await trio.to_thread.run_sync(
                    _client_loop, stubs, str(plugin.dra_socket), n
                )
                await plugin.stop()
                nursery.cancel_scope.cancel()
    micros = sorted(s / 1000 for s in samples)
    return {
        "name": "dra_node_prepare_resources",
        "calls": n,
        "concurrent_nri_load": nri_load,
        "nri_ops_during_run": load_ops[0],
        "median_us": round(statistics.median(micros), 1),
        "p99_us": round(micros[min(len(micros) - 1, int(len(micros) * 0.99))], 1),
    }


def _client_loop(stubs: KubeletStubs, socket: str, n: int) -> list[int]:
    api = stubs.dra["v1"]
    with grpc.insecure_channel(f"unix:{socket}") as channel:
        stub = api.grpc.DRAPluginStub(channel)
        samples = []
        for i in range(WARM_UP + n):
            claim = api.pb2.Claim(namespace="default", name=f"c{i}", uid=f"uid-{i}")
            request = api.pb2.NodePrepareResourcesRequest(claims=[claim])
            start = time.perf_counter_ns()
            stub.NodePrepareResources(request, timeout=10)
            if i >= WARM_UP:
                samples.append(time.perf_counter_ns() - start)
        return samples


async def _nri_load(manager: ResourceManager, ops: list[int]) -> None:
    """Container create/remove churn through the manager, as NRI events would arrive."""
    pod = Pod(id="pod-0", name="load", namespace="default")
    i = 0
    while True:
        container = Container(id=f"c-{i}", pod_id=pod.id, name="load")
        await manager.create_container(pod, container)
        await manager.remove_container(pod, container)
        ops[0] += 2
        i += 1
        await trio.sleep(0)  # let the DRA handlers in between, as separate NRI requests would


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    for load in (False, True):
        print(trio.run(partial(bench_prepare, n, nri_load=load)))


if __name__ == "__main__":
    main()
