"""Load + SIGTERM: 1,000 requests in flight (NRI events and NodePrepareResources), then a
real SIGTERM to the daemon in the middle of them.

The in-process daemon (``Daemon`` with ``NriService`` and ``KubeletPlugin``, as
``app.build_services`` wires them) lets the test look inside afterwards: the exit is the
clean path (no grace expiry, exit 0), no task of the daemon is left, every request was either
answered or saw its connection closed, and the policy holds each container fully (its
allocation with the cpuset its reply carried) or not at all.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest
import trio

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.daemon import EXIT_OK, Daemon
from nri_resmgr.dra.kubeletplugin import KubeletPlugin
from nri_resmgr.nri.service import NriService
from nri_resmgr.sim.runtime import Simulator
from tests.dra.fake_driver import DRIVER, AllocatedEverywhere, LockedDriver
from tests.dra.kubelet_client import KubeletStubs
from tests.reliability.load import (
    DraLoad,
    NriOutcomes,
    container_id,
    create_reply_cpus,
    nri_pod,
    poll,
)
from tests.reliability.workload import allocations, fast_backoff, topology_manager

NRI_PODS = 250  # x2 requests (RunPodSandbox, CreateContainer)
WARM_PODS = 4  # of those, created before the others, one at a time
DRA_CALLS = 500
GRACE = 10.0  # the daemon's --shutdown-grace
GUARD = 60  # hang guard only


def task_names(nursery_owner: trio.lowlevel.Task) -> set[str]:
    """Every task below ``nursery_owner`` (the test's own task tree)."""
    names: set[str] = set()
    stack = [nursery_owner]
    while stack:
        task = stack.pop()
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                names.add(child.name)
                stack.append(child)
    return names


async def test_sigterm_under_load_exits_cleanly_and_half_applies_nothing(
    aio_loop: asyncio.AbstractEventLoop,
    kubelet_stubs: KubeletStubs,
    sock_dir: Path,
    host_root: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    manager = topology_manager(host_root)
    nri_socket = str(sock_dir / "nri.sock")
    nri = NriService(manager, nri_socket, "resmgr", "90", env={}, backoff=fast_backoff())
    dra = KubeletPlugin(LockedDriver(manager.lock), DRIVER, AllocatedEverywhere(),  # type: ignore[arg-type]
                        sock_dir / "plugins", sock_dir / "registry", cdi_dir=sock_dir / "cdi",
                        poll_interval=0.05)  # fmt: skip
    daemon = Daemon([nri, dra], grace=GRACE)
    load = DraLoad(kubelet_stubs, dra.dra_socket)
    nri_out = NriOutcomes()
    exit_code: list[int] = []
    timing: dict[str, float] = {}
    me = trio.lowlevel.current_task()

    async def run_daemon() -> None:
        exit_code.append(await daemon.run())
        timing["exit"] = time.perf_counter()

    try:
        with trio.fail_after(GUARD):
            async with Simulator.listen(nri_socket) as sim, trio.open_nursery() as outer:
                before = task_names(me)
                outer.start_soon(run_daemon, name="daemon")
                plugin = await sim.wait_plugin()
                await poll(lambda: "running" in daemon.events)
                for n in range(WARM_PODS):  # answered before the storm: exclusive CPUs held
                    await nri_pod(plugin, n, nri_out, "guaranteed")
                await trio.to_thread.run_sync(load.send, DRA_CALLS)
                async with trio.open_nursery() as clients:
                    for n in range(WARM_PODS, NRI_PODS):
                        qos = "guaranteed" if n % 32 == 0 else "besteffort"
                        clients.start_soon(nri_pod, plugin, n, nri_out, qos)
                    # In the middle: a third of the NRI requests answered, the rest in flight.
                    await poll(lambda: nri_out.total >= 2 * NRI_PODS // 3)
                    timing["signal"] = time.perf_counter()
                    os.kill(os.getpid(), signal.SIGTERM)
                dra_counts, dra_other = await trio.to_thread.run_sync(load.outcomes)
                await poll(lambda: bool(exit_code))
                daemon_tasks_left = task_names(me) - before - {"daemon"}
    finally:
        load.close()

    exit_seconds = timing["exit"] - timing["signal"]
    print(f"exit {exit_seconds:.3f}s after SIGTERM; NRI {dict(nri_out.counts)}, "
          f"DRA {dict(dra_counts)}")  # fmt: skip

    # The clean path: services stopped within the grace, exit 0, nothing left running.
    assert exit_code == [EXIT_OK], daemon.events
    assert "grace expired" not in daemon.events
    assert daemon.shutdown_reason == "received SIGTERM"
    assert daemon_tasks_left == set()
    aio_tasks = [t for t in asyncio.all_tasks(aio_loop) if not t.done()]
    assert aio_tasks == []
    assert not dra.dra_socket.exists() and not dra.registration_socket.exists()
    server_errors = [r for r in caplog.records if r.name == "grpclib.server" and r.levelno >= 40]
    assert server_errors == [], f"{len(server_errors)} grpclib handler failures at shutdown"

    # Every request: answered or its connection closed; nothing else, never a hang.
    assert nri_out.other == [] and dra_other == []
    assert nri_out.total == 2 * NRI_PODS
    assert sum(dra_counts.values()) == DRA_CALLS
    assert nri_out.counts["answered"] + dra_counts["answered"] > 0
    assert nri_out.counts["closed"] + dra_counts["closed"] > 0, "SIGTERM came after all answers"

    # Nothing half-applied: each container is fully known (its allocation holding the cpuset
    # it was answered) or absent, and every answered CreateContainer is known, holding the
    # exclusive CPUs its reply gave. (Shared cpusets legitimately change later, with the pool.)
    allocs = allocations(manager)
    assert set(allocs) <= {container_id(n) for n in range(NRI_PODS)}
    assert [cid for cid, a in allocs.items() if a.cpus is None] == []
    for cid, reply in nri_out.answered.items():
        assert cid in allocs, f"{cid} was answered but the cache forgot it"
        assert allocs[cid].cpus is not None
        assert allocs[cid].exclusive.issubset(CpuSet.parse(create_reply_cpus(reply)))
    warm = [container_id(n) for n in range(WARM_PODS)]
    assert all(allocs[cid].exclusive for cid in warm), "no exclusive allocation was exercised"
