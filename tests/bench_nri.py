"""CreateContainer round trip through Simulator + NriService, beside a raw unix-socket floor.

``bench_create_container(n_live, n_samples)`` first creates ``n_live`` containers (so the
manager and simulator hold a realistic population), then times ``n_samples`` more
CreateContainer relays, and in the same run times a plain unix-socket ping-pong of a
similarly sized message. Figures are microseconds. Run alone with
``python -m tests.bench_nri``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import tempfile
import time

import trio

from nri_resmgr.sim.runtime import Simulator
from tests.nri.helpers import container, make_manager, pod, running_service

_PING = b"x" * 200


def _summary(samples_ns: list[int]) -> dict[str, float]:
    us = sorted(s / 1000 for s in samples_ns)
    p99 = us[min(len(us) - 1, round(0.99 * (len(us) - 1)))]
    return {"median_us": round(statistics.median(us), 1), "p99_us": round(p99, 1)}


async def _create_container_samples(path: str, n_live: int, n_samples: int) -> list[int]:
    manager = make_manager()
    samples = []
    async with Simulator.listen(path) as sim, running_service(manager, path):
        await sim.wait_plugin()
        p = pod()
        await sim.run_pod_sandbox(p)
        for i in range(n_live):
            await sim.create_container(p, container(i))
        for i in range(n_live, n_live + n_samples):
            ctr = container(i)
            start = time.perf_counter_ns()
            await sim.create_container(p, ctr)
            samples.append(time.perf_counter_ns() - start)
    return samples


async def _ping_pong_samples(path: str, n_samples: int) -> list[int]:
    listener_sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    await listener_sock.bind(path)
    listener_sock.listen(1)
    listener = trio.SocketListener(listener_sock)
    samples = []

    async def echo() -> None:
        stream = await listener.accept()
        while data := await stream.receive_some(65536):
            await stream.send_all(data)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(echo)
        client = await trio.open_unix_socket(path)
        for _ in range(n_samples):
            start = time.perf_counter_ns()
            await client.send_all(_PING)
            got = 0
            while got < len(_PING):
                got += len(await client.receive_some(65536))
            samples.append(time.perf_counter_ns() - start)
        await client.aclose()
        nursery.cancel_scope.cancel()
    await listener.aclose()
    return samples


async def bench_create_container(n_live: int, n_samples: int) -> dict[str, object]:
    tmp = tempfile.mkdtemp(prefix="nri-bench-", dir="/tmp")
    try:
        create = await _create_container_samples(os.path.join(tmp, "nri.sock"), n_live, n_samples)
        floor = await _ping_pong_samples(os.path.join(tmp, "ping.sock"), n_samples)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "name": "nri_create_container",
        "peer": "python-simulator",
        "live_containers": n_live,
        "samples": n_samples,
        "create_container": _summary(create),
        "unix_ping_pong": _summary(floor),
    }


if __name__ == "__main__":
    print(json.dumps(trio.run(bench_create_container, 500, 1000), indent=2))
