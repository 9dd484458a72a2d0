"""The update retry in a real plugin session, against the Python runtime simulator over a
unix socket: it is supervised by the session (ends with the connection), it does not hold
the manager lock while the runtime answers, and the deferred path (RemoveContainer) tells
the policy of failures too. Real time with a short backoff; nothing asserted about time."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import trio

from nri_resmgr._gen.nri.pkg.api import v1alpha1 as api
from nri_resmgr.backoff import Backoff
from nri_resmgr.resmgr.manager import ResourceManager
from nri_resmgr.resmgr.model import Adjustment, Update
from nri_resmgr.resmgr.retry import UpdateRetry
from nri_resmgr.sim.connection import SimPlugin
from nri_resmgr.sim.runtime import Simulator
from tests.dra.conftest import wait_until
from tests.nri.helpers import WantingPolicy, container, make_manager, pod, running_service
from tests.nri.test_end_to_end import DialFailures

GUARD = 20.0


class Gate:
    """The simulated runtime's UpdateContainers, steered by the test: fail every update
    while ``fail``, wait on ``hold`` (if set) before answering, count the calls."""

    def __init__(self) -> None:
        self.fail = True
        self.hold: trio.Event | None = None
        self.calls = 0
        self.entered = trio.Event()

    async def wait_calls(self, n: int) -> None:
        while self.calls < n:
            await self.entered.wait()


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[Gate]:
    g = Gate()
    original = SimPlugin._update_containers

    async def steered(
        self: SimPlugin, req: api.UpdateContainersRequest
    ) -> api.UpdateContainersResponse:
        g.calls += 1
        g.entered.set()
        g.entered = trio.Event()
        if g.hold is not None:
            await g.hold.wait()
        if g.fail:
            return api.UpdateContainersResponse(failed=list(req.update))
        return await original(self, req)

    monkeypatch.setattr(SimPlugin, "_update_containers", steered)
    yield g


def with_fast_retry(policy: WantingPolicy) -> ResourceManager:
    manager = make_manager(policy)
    manager.retry = UpdateRetry(backoff=lambda: Backoff(initial=0.01, maximum=0.05))
    return manager


def cpus(sim: Simulator, cid: str) -> str:
    return sim.containers[cid].linux.resources.cpu.cpus


async def test_the_lock_is_free_while_the_runtime_answers_a_retry(
    sock_path: str, gate: Gate
) -> None:
    policy = WantingPolicy()
    policy.wanted["ctr1"] = "2-3"
    manager = with_fast_retry(policy)
    with trio.fail_after(GUARD):
        async with (
            Simulator.listen(sock_path, pods=[pod()], containers=[container(1)]) as sim,
            running_service(manager, sock_path),
        ):
            await sim.wait_plugin()
            await sim.next_update()  # the sync reply: ctr1 on 0-1
            failed = await manager.send_updates([Update("ctr1", Adjustment(cpuset_cpus="2-3"))])
            assert [u.container_id for u in failed] == ["ctr1"]
            gate.hold = trio.Event()
            await gate.wait_calls(2)  # a retry waits on the runtime's answer
            assert not manager.lock.locked()
            # An NRI request that needs the lock is served meanwhile.
            rsp = await sim.create_container(pod(), container(2))
            assert rsp.adjust.linux.resources.cpu.cpus == "0-1"
            assert cpus(sim, "ctr1") == "0-1"  # the retry is still unanswered
            gate.fail = False
            gate.hold.set()
            applied = await sim.next_update()
            assert [(u.container_id, u.linux.resources.cpu.cpus) for u in applied] == [
                ("ctr1", "2-3")
            ]
            assert cpus(sim, "ctr1") == "2-3"
    assert policy.failed == ["ctr1"] * (gate.calls - 1)


async def test_the_connection_ending_stops_the_retries_cleanly(sock_path: str, gate: Gate) -> None:
    policy = WantingPolicy()
    policy.wanted["ctr1"] = "2-3"
    manager = with_fast_retry(policy)
    with trio.fail_after(GUARD), DialFailures() as dial_failures:
        async with running_service(manager, sock_path) as service:
            async with Simulator.listen(sock_path, pods=[pod()], containers=[container(1)]) as sim:
                await sim.wait_plugin()
                await manager.send_updates([Update("ctr1", Adjustment(cpuset_cpus="2-3"))])
                await gate.wait_calls(3)  # retrying
            # The runtime went away: the session ended, the service dials again.
            await dial_failures.reached(dial_failures.count + 2)
            assert manager.retry.pending() == []
            calls = gate.calls
            await dial_failures.reached(dial_failures.count + 2)
            assert gate.calls == calls  # nothing retried without a connection
            async with Simulator.listen(sock_path, pods=[pod()], containers=[container(1)]) as sim2:
                await sim2.wait_plugin()  # the new Synchronize covers the container
                await sim2.next_update()
                assert gate.calls == calls
                assert manager.retry.pending() == []
            assert service.connections == 2


async def test_a_failed_deferred_update_is_told_to_the_policy_and_retried(
    sock_path: str, gate: Gate
) -> None:
    """RemoveContainer's updates for other containers go out after the reply (deferred);
    their failures used to be logged only, so the policy believed the runtime had them."""
    policy = WantingPolicy()
    policy.wanted["survivor"] = "0-3"
    manager = with_fast_retry(policy)
    survivor = api.Container(id="survivor", pod_sandbox_id="pod0", name="survivor")
    with trio.fail_after(GUARD):
        async with (
            Simulator.listen(sock_path, pods=[pod()], containers=[container(1), survivor]) as sim,
            running_service(manager, sock_path),
        ):
            await sim.wait_plugin()
            await sim.next_update()  # the sync reply
            await sim.remove_container(pod(), container(1))  # PinningPolicy: survivor 0-3
            await policy.told.wait()
            assert policy.failed == ["survivor"]
            gate.fail = False
            applied = await sim.next_update()  # the retry
            assert [u.container_id for u in applied] == ["survivor"]
            assert cpus(sim, "survivor") == "0-3"
            await wait_until(lambda: not manager.retry.pending())  # once the reply is in
