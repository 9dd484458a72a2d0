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
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import trio
import trio_asyncio

from nri_resmgr.config.models import DraConfig, TemplateSpec
from nri_resmgr.dra.kubeletplugin import KubeletPlugin
from nri_resmgr.policies.template import TemplatePolicy
from nri_resmgr.resmgr.manager import ResourceManager
from nri_resmgr.resmgr.model import Container, Pod
from nri_resmgr.resmgr.policy import PolicyEnv
from tests.dra.fake_driver import DRIVER, AllocatedEverywhere, LockedDriver
from tests.dra.kubelet_client import generate_grpcio_stubs

WARM_UP = 100
# Calls a server gets before the client turns to the next one (``bench_prepare_with_floors``).
BATCH = 50
REPO = Path(__file__).resolve().parents[1]
FLOORS = ("floor_grpclib_asyncio", "floor_grpcio")


async def bench_prepare(n: int = 2000, *, nri_load: bool = True) -> dict[str, Any]:
    """Median and p99 (µs) of ``n`` NodePrepareResources calls (v1), one claim each, from a
    grpcio client in its own process (``tests.bench_dra_client``), and the daemon's CPU time
    per call (idle: all of it is the calls'; under load it includes the NRI churn)."""
    rows = await _run_against_daemon(n, nri_load=nri_load, floors=())
    return rows["daemon"]


async def bench_prepare_with_floors(n: int = 2000) -> dict[str, Any]:
    """The idle daemon and the floors (``tests.bench_dra_floor``: trivial grpclib-on-asyncio
    and grpcio servers, each in a process of its own), timed by one client that takes them in
    turns, ``BATCH`` calls at a time: idle - floor_grpclib_asyncio is what is ours, the floor
    is the fixed stack's. Rows keyed ``idle`` and by the names in ``FLOORS``."""
    rows = await _run_against_daemon(n, nri_load=False, floors=FLOORS)
    return {"idle": rows.pop("daemon"), **rows}


async def _run_against_daemon(
    n: int, *, nri_load: bool, floors: tuple[str, ...]
) -> dict[str, dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="bench-dra-") as tmp:
        stubs = Path(tmp) / "stubs"
        generate_grpcio_stubs(stubs)
        async with AsyncExitStack() as stack:
            servers = [
                await stack.enter_async_context(_floor(kind[len("floor_") :], stubs, Path(tmp)))
                for kind in floors
            ]
            async with trio_asyncio.open_loop():
                manager = ResourceManager(
                    TemplatePolicy(),
                    TemplateSpec(dra=DraConfig(enabled=True)),
                    PolicyEnv("", "n1"),
                )
                # The stack and the claim service, a claim read from an in-process store, and
                # a driver that answers under the manager lock (as the CPU driver claims);
                # no device metadata files.
                plugin = KubeletPlugin(
                    LockedDriver(manager.lock), DRIVER, AllocatedEverywhere(),  # type: ignore[arg-type]
                    Path(tmp) / "p", Path(tmp) / "r", device_metadata=False,
                )  # fmt: skip
                async with trio.open_nursery() as nursery:
                    await plugin.start(nursery)
                    load_ops = [0]
                    if nri_load:
                        nursery.start_soon(_nri_load, manager, load_ops)
                    before = [await s.cpu_seconds() for s in servers]
                    cpu = resource.getrusage(resource.RUSAGE_SELF)
                    sockets = [plugin.dra_socket, *(s.socket for s in servers)]
                    client = await trio.run_process(
                        [sys.executable, "-m", "tests.bench_dra_client", str(stubs), str(n),
                         str(WARM_UP), str(BATCH), *map(str, sockets)],
                        capture_stdout=True, cwd=REPO,
                    )  # fmt: skip
                    server_cpu = [_cpu_seconds(resource.getrusage(resource.RUSAGE_SELF), cpu)]
                    server_cpu += [
                        await s.cpu_seconds() - b for s, b in zip(servers, before, strict=True)
                    ]
                    await plugin.stop()
                    nursery.cancel_scope.cancel()
    targets = json.loads(client.stdout)["targets"]
    rows = {}
    for name, target, cpu_s in zip(("daemon", *floors), targets, server_cpu, strict=True):
        extra = {"concurrent_nri_load": nri_load, "nri_ops_during_run": load_ops[0]}
        rows[name] = _summary(
            "dra_node_prepare_resources" if name == "daemon" else f"dra_{name}",
            target["samples_ns"],
            **(extra if name == "daemon" else {}),
            server_cpu_us_per_call=round(cpu_s * 1e6 / (n + WARM_UP), 1),
            client_cpu_us_per_call=round(target["cpu_s"] * 1e6 / n, 1),
            # Wall-clock figures on a shared machine mean little without it.
            load_average_1m=round(os.getloadavg()[0], 2),
        )
    return rows


class _FloorServer:
    """A ``tests.bench_dra_floor`` process: its socket, and its CPU time on request."""

    def __init__(self, process: trio.Process, socket: Path) -> None:
        self.process = process
        self.socket = socket
        self._lines = _lines(process)

    async def ready(self) -> None:
        if await anext(self._lines) != "ready":
            raise RuntimeError(f"floor server on {self.socket} did not start")

    async def cpu_seconds(self) -> float:
        assert self.process.stdin is not None
        await self.process.stdin.send_all(b"\n")
        return float(await anext(self._lines))


async def _lines(process: trio.Process) -> AsyncIterator[str]:
    assert process.stdout is not None
    buffered = b""
    async for chunk in process.stdout:
        buffered += chunk
        while b"\n" in buffered:
            line, buffered = buffered.split(b"\n", 1)
            yield line.decode()


@asynccontextmanager
async def _floor(kind: str, stubs: Path, tmp: Path) -> AsyncIterator[_FloorServer]:
    socket = tmp / f"{kind}.sock"
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "tests.bench_dra_floor", kind, str(stubs), str(socket)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=REPO,
    )  # fmt: skip
    server = _FloorServer(process, socket)
    try:
        with trio.fail_after(30):
            await server.ready()
        yield server
    finally:
        assert process.stdin is not None
        await process.stdin.aclose()  # the floor exits when its stdin closes
        with trio.move_on_after(5):
            await process.wait()
        if process.returncode is None:
            process.kill()


def _cpu_seconds(after: resource.struct_rusage, before: resource.struct_rusage) -> float:
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


async def _nri_load(manager: ResourceManager, ops: list[int]) -> None:
    """Container create/remove churn through the manager, as NRI events would arrive."""
    pod = Pod(id="pod-0", name="load", namespace="default")
    i = 0
    while True:
        container = Container(id=f"c-{i}", pod_id=pod.id, name="load")
        async with manager.lock:  # each event takes it, as the NRI task path does
            manager.create_container(pod, container)
        async with manager.lock:
            manager.remove_container(pod, container)
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
    from nri_resmgr.dra.kubeletplugin.devices import Device
    from nri_resmgr.dra.kubeletplugin.publisher import SlicePublisher, resource_slices
    from nri_resmgr.kube import KubeClient
    from nri_resmgr.kube.resources import NODES
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
    print(trio.run(bench_prepare_with_floors, n))
    print(trio.run(partial(bench_prepare, n, nri_load=True)))
    for on_tmpfs in (False, True):
        print(trio.run(partial(bench_claim_prepare, min(n, 1000), state_on_tmpfs=on_tmpfs)))
    print(trio.run(bench_slice_repair))


if __name__ == "__main__":
    main()
