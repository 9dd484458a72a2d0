"""Benchmark: NodePrepareResources round trip, grpcio client (as kubelet) to our plugin, while
NRI-like requests keep the manager lock busy.

The client is a grpcio process of its own (``tests.bench_dra_client``), as kubelet is: in
the daemon's process it would compete for the GIL. It times each call with
``perf_counter_ns``; the daemon's own CPU time per call is reported beside the latencies.
Run ``python -m tests.bench_dra [n]`` or call ``bench_prepare(n)`` from ``nox -s bench``.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import trio
import trio_asyncio

from nri_resmgr.config.models import DraConfig, TemplateSpec
from nri_resmgr.dra.plugin import KubeletPlugin
from nri_resmgr.resmgr.manager import ResourceManager
from nri_resmgr.resmgr.model import Container, Pod
from nri_resmgr.resmgr.policies.template import TemplatePolicy
from nri_resmgr.resmgr.policy import PolicyEnv
from tests.dra.kubelet_client import generate_grpcio_stubs

WARM_UP = 100
REPO = Path(__file__).resolve().parents[1]


async def bench_prepare(n: int = 2000, *, nri_load: bool = True) -> dict[str, Any]:
    """Median and p99 (µs) of ``n`` NodePrepareResources calls (v1), one claim each, from a
    grpcio client in its own process (``tests.bench_dra_client``), and the daemon's CPU time
    per call (idle: all of it is the calls'; under load it includes the NRI churn)."""
    with tempfile.TemporaryDirectory(prefix="bench-dra-") as tmp:
        stubs = Path(tmp) / "stubs"
        generate_grpcio_stubs(stubs)
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
                cpu = resource.getrusage(resource.RUSAGE_SELF)
                client = await trio.run_process(
                    [sys.executable, "-m", "tests.bench_dra_client", str(stubs),
                     str(plugin.dra_socket), str(n), str(WARM_UP)],
                    capture_stdout=True, cwd=REPO,
                )  # fmt: skip
                cpu_s = _cpu_seconds(resource.getrusage(resource.RUSAGE_SELF), cpu)
                await plugin.stop()
                nursery.cancel_scope.cancel()
    out = json.loads(client.stdout)
    return _summary(
        "dra_node_prepare_resources",
        out["samples_ns"],
        concurrent_nri_load=nri_load,
        nri_ops_during_run=load_ops[0],
        server_cpu_us_per_call=round(cpu_s * 1e6 / (n + WARM_UP), 1),
        client_cpu_us_per_call=round(out["cpu_s"] * 1e6 / (n + WARM_UP), 1),
        # Wall-clock figures on a shared machine mean little without it.
        load_average_1m=round(os.getloadavg()[0], 2),
    )


def _cpu_seconds(after: resource.struct_rusage, before: resource.struct_rusage) -> float:
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


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


def _summary(name: str, samples_ns: list[int], **extra: Any) -> dict[str, Any]:
    micros = sorted(s / 1000 for s in samples_ns)
    return {
        "name": name,
        "calls": len(micros),
        **extra,
        "median_us": round(statistics.median(micros), 1),
        "p99_us": round(micros[min(len(micros) - 1, int(len(micros) * 0.99))], 1),
    }


SHM = Path("/dev/shm")


async def bench_claim_prepare(n: int = 1000, *, state_on_tmpfs: bool = False) -> dict[str, Any]:
    """Prepare of one claim of 2 CPUs (cpu6, cpu7) with the ResourceClaim GET answered in
    process (excluded): device mapping, the policy claim under the manager lock with the
    UpdateContainers of 8 shared containers, the CDI spec (on tmpfs, as /var/run/cdi is) and
    the state file: on the disk of the temporary directory (fsynced, as with a
    ``--dra-state-dir`` on disk) or on tmpfs (not fsynced, as in the default /run/nri-resmgr).
    Each prepare is undone by an (untimed) unprepare."""
    from tests.dra.claim_setup import claim_object, make_node
    from tests.policies.workload import besteffort

    shm = SHM if SHM.is_dir() else None
    with (
        tempfile.TemporaryDirectory(prefix="bench-claim-") as tmp,
        tempfile.TemporaryDirectory(prefix="bench-claim-", dir=shm) as fast,
    ):
        state = Path(fast if state_on_tmpfs else tmp) / "state"
        node = make_node(Path(tmp), cdi_dir=Path(fast) / "cdi", state_dir=state)
        for i in range(8):
            node.runtime.create(besteffort(f"be{i}"))
        samples = []
        for i in range(WARM_UP + n):
            uid = f"00000000-0000-0000-0000-{i:012d}"
            node.claims.add(claim_object(uid, ["cpu6", "cpu7"]))
            ref = node.ref(uid)
            start = time.perf_counter_ns()
            outcome = await node.preparer.prepare([ref])
            elapsed = time.perf_counter_ns() - start
            assert outcome[uid].error == "", outcome[uid].error
            await node.preparer.unprepare([ref])
            if i >= WARM_UP:
                samples.append(elapsed)
    where = "tmpfs" if state_on_tmpfs else "disk"
    return _summary(f"dra_prepare_cpu_claim_state_on_{where}", samples, cpus=2, shared_containers=8)


async def bench_slice_repair(rounds: int = 20) -> dict[str, Any]:
    """From deleting every slice of a 200-device pool (2 slices), as kubelet's start-up wipe
    does, to both back (seen by a client polling every 5 ms), against a real kube-apiserver;
    the publisher's re-list is 300 s, so the watch is what repairs it."""
    from nri_resmgr.backoff import Backoff
    from nri_resmgr.dra.publisher import SlicePublisher, resource_slices
    from nri_resmgr.kube import KubeClient
    from nri_resmgr.kube.resources import NODES
    from nri_resmgr.resmgr.model import Device
    from tests.kube.apiserver import start_apiserver

    slices_api = resource_slices("v1")
    devices = [Device(f"cpu{i}", {"cpuID": i}) for i in range(200)]

    async def current() -> list[Device]:
        return devices

    with tempfile.TemporaryDirectory(prefix="bench-slices-") as tmp:
        server = start_apiserver(Path(tmp))
        try:
            async with KubeClient(server.config()) as kube:
                await kube.create(NODES, {"metadata": {"name": "bench-node"}})
                publisher = SlicePublisher(
                    kube, current, "topology-aware.nri.io", "bench-node",
                    resync_interval=300.0, backoff=Backoff(initial=0.05, maximum=1.0),
                )  # fmt: skip
                selector = "spec.nodeName=bench-node"

                async def names() -> set[str]:
                    found = await kube.list(slices_api, field_selector=selector)
                    return {o["metadata"]["name"] for o in found.items}

                samples = []
                async with trio.open_nursery() as nursery:
                    await nursery.start(publisher.run)
                    while len(await names()) != 2:
                        await trio.sleep(0.005)
                    for _ in range(rounds):
                        old = await names()
                        start = time.perf_counter_ns()
                        for name in old:
                            await kube.delete(slices_api, name)
                        while True:
                            now = await names()
                            if len(now) == 2 and now.isdisjoint(old):
                                break
                            await trio.sleep(0.005)
                        samples.append(time.perf_counter_ns() - start)
                    nursery.cancel_scope.cancel()
        finally:
            server.shutdown()
    return _summary("dra_wiped_pool_republished", samples, devices=200, slices=2)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    for load in (False, True):
        print(trio.run(partial(bench_prepare, n, nri_load=load)))
    for on_tmpfs in (False, True):
        print(trio.run(partial(bench_claim_prepare, min(n, 1000), state_on_tmpfs=on_tmpfs)))
    print(trio.run(bench_slice_repair))


if __name__ == "__main__":
    main()
