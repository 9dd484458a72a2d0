"""Fault: the runtime restarts while requests are in flight (the NRI peer closes, comes back).

The daemon must re-dial, take the new runtime's Synchronize as the truth and end up with the
same containers the runtime has: none lost (a container created while we were cut off gets a
placement), none doubled (an allocation whose reply never reached the runtime is not kept
next to the re-allocation), and the containers that held exclusive CPUs before keep them.
"""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing

from nri_resmgr._gen.nri.pkg.api import v1alpha1 as api
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.resmgr.manager import ResourceManager
from nri_resmgr.resmgr.model import Adjustment, Container, Pod, Update
from nri_resmgr.sim.runtime import Simulator
from tests.reliability.workload import (
    allocations,
    inconsistencies,
    mixed_pod,
    nri_service,
    topology_manager,
)

GUARD = 30  # hang guard only; the test takes well under a second


async def create_all(sim: Simulator, work: list[tuple[api.PodSandbox, api.Container]]) -> None:
    async with trio.open_nursery() as nursery:
        for pod, ctr in work:

            async def one(pod: api.PodSandbox = pod, ctr: api.Container = ctr) -> None:
                await sim.run_pod_sandbox(pod)
                await sim.create_container(pod, ctr)
                await sim.start_container(pod, ctr)

            nursery.start_soon(one)


def exclusive(manager: ResourceManager) -> dict[str, CpuSet]:
    return {cid: a.exclusive for cid, a in allocations(manager).items() if a.exclusive}


def cut_after_decisions(
    manager: ResourceManager, ids: set[str], count: int, runtime: Simulator
) -> None:
    """Close ``runtime``'s plugin connections as the policy decides the ``count``-th create
    of ``ids`` (the decision itself stands)."""
    policy = manager.policy
    decide = policy.create_container
    decided: list[str] = []

    def create_container(pod: Pod, ctr: Container) -> tuple[Adjustment, list[Update]]:
        result = decide(pod, ctr)
        if ctr.id in ids:
            decided.append(ctr.id)
            if len(decided) == count:
                for plugin in runtime.active_plugins():
                    plugin.close()
        return result

    policy.create_container = create_container  # type: ignore[method-assign]


async def settle() -> None:
    """Let updates the plugin sends after Synchronize reach the simulator (applied on receipt)."""
    await trio.testing.wait_all_tasks_blocked()


async def test_runtime_restart_mid_stream_loses_and_doubles_nothing(
    sock_dir: Path, host_root: Path
) -> None:
    socket = str(sock_dir / "nri.sock")
    manager = topology_manager(host_root)
    settled = [mixed_pod(n) for n in range(4)]
    in_flight = [mixed_pod(n) for n in range(4, 12)]
    with trio.fail_after(GUARD):
        async with nri_service(manager, socket) as service:
            async with Simulator.listen(socket) as first:
                await first.wait_plugin()
                await create_all(first, settled)
                assert inconsistencies(manager, first) == []
                exclusive_before = exclusive(manager)
                assert exclusive_before, "the settled workload holds no exclusive CPUs"

                # The runtime goes away while those creates are being answered: right as the
                # policy decides the third (its reply may never arrive; later ones are cut).
                # Cut from inside the decision, not by watching from here: the daemon may
                # answer every request of one read before this task runs again.
                cut_after_decisions(manager, {c.id for _, c in in_flight}, 3, first)
                await create_all(first, in_flight)
            cut_off = [
                c.id for _, c in in_flight if not first.containers[c.id].linux.resources.cpu.cpus
            ]
            pods, containers = list(first.pods.values()), list(first.containers.values())

            # The runtime comes back with what it had: Synchronize restores the placements.
            async with Simulator.listen(socket, pods=pods, containers=containers) as second:
                await second.wait_plugin()
                await settle()
                assert service.connections == 2
                assert inconsistencies(manager, second) == []
                # Exclusive CPUs stay with their containers; shared pools may shrink.
                after = exclusive(manager)
                assert {cid: after.get(cid) for cid in exclusive_before} == exclusive_before
                # A container the runtime created without our answer got a placement now.
                allocs = allocations(manager)
                assert all(allocs[cid].cpus is not None for cid in cut_off)

                # And the node keeps working: more containers, then everything removed.
                more = [mixed_pod(n) for n in range(12, 16)]
                await create_all(second, more)
                assert inconsistencies(manager, second) == []
                for pod, ctr in [*settled, *in_flight, *more]:
                    await second.stop_container(pod, ctr)
                    await second.remove_container(pod, ctr)
                assert allocations(manager) == {} and second.containers == {}
    # The cut really happened mid-stream (otherwise this test proves nothing).
    assert cut_off, "no create was in flight when the runtime went away"
