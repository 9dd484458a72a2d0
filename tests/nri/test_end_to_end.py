"""NriService + ResourceManager + the in-repo runtime simulator, over a real unix socket."""

from __future__ import annotations

import logging

import pytest
import trio

from nri_resmgr._gen.nri.pkg.api import v1alpha1 as api
from nri_resmgr.nri.events import event_bit
from nri_resmgr.nri.ttrpc_client import TtrpcClient
from nri_resmgr.resmgr.model import Adjustment, Update
from nri_resmgr.sim.connection import SimConfig
from nri_resmgr.sim.runtime import Simulator
from tests.nri.helpers import PinningPolicy, container, make_manager, pod, running_service

# A hang guard only: every step here finishes in milliseconds when the code works.
GUARD = 10


async def test_registration_and_sync_with_existing_containers(sock_path: str) -> None:
    policy = PinningPolicy()
    manager = make_manager(policy)
    existing = [container(1), container(2)]
    with trio.fail_after(GUARD):
        async with (
            Simulator.listen(sock_path, pods=[pod()], containers=existing) as sim,
            running_service(manager, sock_path),
        ):
            plugin = await sim.wait_plugin()
            assert (plugin.name, plugin.index) == ("resmgr", "90")
            assert policy.synced == [(1, 2)]
            assert set(policy.containers) == {"ctr1", "ctr2"}
            # The sync reply's updates reached the runtime side and were applied there.
            updates = await sim.next_update()
            assert sorted(u.container_id for u in updates) == ["ctr1", "ctr2"]
            assert sim.containers["ctr1"].linux.resources.cpu.cpus == "0-1"


async def test_create_container_returns_the_policy_adjustment_on_the_wire(sock_path: str) -> None:
    policy = PinningPolicy()
    manager = make_manager(policy)
    with trio.fail_after(GUARD):
        async with Simulator.listen(sock_path) as sim, running_service(manager, sock_path):
            await sim.wait_plugin()
            p, c = pod(), container(1)
            await sim.run_pod_sandbox(p)
            rsp = await sim.create_container(p, c)
            cpu = rsp.adjust.linux.resources.cpu
            assert (cpu.cpus, cpu.mems, cpu.shares.value) == ("0-1", "0", 512)
            await sim.start_container(p, c)
            assert "pod0" in policy.pods and "ctr1" in policy.containers
            await sim.remove_container(p, c)
            assert "ctr1" not in policy.containers


async def test_event_mask_is_what_we_handle(sock_path: str) -> None:
    with trio.fail_after(GUARD):
        async with (
            Simulator.listen(sock_path) as sim,
            running_service(make_manager(), sock_path),
        ):
            plugin = await sim.wait_plugin()
    assert plugin.events & event_bit(api.Event.CREATE_CONTAINER)
    assert plugin.events & event_bit(api.Event.UPDATE_POD_SANDBOX)
    assert not plugin.events & event_bit(api.Event.VALIDATE_CONTAINER_ADJUSTMENT)
    assert not plugin.events & event_bit(api.Event.POST_CREATE_CONTAINER)


async def test_old_runtime_gets_no_unknown_event_bits_and_state_change_delivery(
    sock_path: str,
) -> None:
    policy = PinningPolicy()
    manager = make_manager(policy)
    old = SimConfig(nri_version="v0.6.1", runtime_name="containerd", runtime_version="v1.7.20")
    with trio.fail_after(GUARD):
        async with Simulator.listen(sock_path, old) as sim, running_service(manager, sock_path):
            plugin = await sim.wait_plugin()
            # The v0.6.1 simulator rejects any bit above 0x7FF, as the real runtime does.
            assert plugin.events & ~0x7FF == 0
            p, c = pod(3), container(7, 3)
            await sim.run_pod_sandbox(p)  # arrives as StateChange(RUN_POD_SANDBOX)
            assert "pod3" in policy.pods
            await sim.create_container(p, c)
            await sim.remove_container(p, c)  # StateChange(REMOVE_CONTAINER)
            assert policy.removed == ["ctr7"]
            # The removal's updates cannot ride on a StateChange reply: UpdateContainers.
            updates = await sim.next_update()
            assert [u.container_id for u in updates] == ["survivor"]


async def test_configure_before_register_reply(sock_path: str) -> None:
    config = SimConfig(configure_before_register_reply=True)
    with trio.fail_after(GUARD):
        async with (
            Simulator.listen(sock_path, config) as sim,
            running_service(make_manager(), sock_path) as service,
        ):
            plugin = await sim.wait_plugin()
            assert plugin.events != 0
            assert service.connections == 1


async def test_split_synchronize(sock_path: str) -> None:
    policy = PinningPolicy()
    ctrs = [container(i) for i in range(10)]
    config = SimConfig(sync_chunk=3)
    with trio.fail_after(GUARD):
        async with (
            Simulator.listen(sock_path, config, pods=[pod()], containers=ctrs) as sim,
            running_service(make_manager(policy), sock_path),
        ):
            await sim.wait_plugin()  # the simulator closes plugins that mishandle "more"
            updates = await sim.next_update()
    # The policy saw everything once, after the last chunk.
    assert policy.synced == [(1, 10)]
    assert len(updates) == 10


async def test_update_containers_from_the_plugin_side(sock_path: str) -> None:
    manager = make_manager()
    with trio.fail_after(GUARD):
        async with (
            Simulator.listen(sock_path, containers=[container(1)]) as sim,
            running_service(manager, sock_path),
        ):
            await sim.wait_plugin()
            await sim.next_update()  # the sync reply
            failed = await manager.send_updates(
                [Update("ctr1", Adjustment(cpuset_cpus="2-3", memory_limit=1 << 30))]
            )
            assert failed == []
            assert sim.containers["ctr1"].linux.resources.cpu.cpus == "2-3"
            assert sim.containers["ctr1"].linux.resources.memory.limit.value == 1 << 30
            failed = await manager.send_updates([Update("nope", Adjustment(cpuset_cpus="1"))])
            assert [u.container_id for u in failed] == ["nope"]


class DialFailures(logging.Handler):
    """Counts the service's failed dials as it logs them, so a test waits for the n-th one."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0
        self._changed = trio.Event()
        self._logger = logging.getLogger("nri_resmgr.nri.service")

    def __enter__(self) -> DialFailures:
        self._saved_level = self._logger.level
        self._logger.setLevel(logging.DEBUG)
        self._logger.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self._logger.removeHandler(self)
        self._logger.setLevel(self._saved_level)

    def emit(self, record: logging.LogRecord) -> None:
        if "retrying" in record.getMessage():
            self.count += 1
            self._changed.set()
            self._changed = trio.Event()

    async def reached(self, n: int) -> None:
        while self.count < n:
            await self._changed.wait()


async def test_reconnect_after_runtime_restart(sock_path: str) -> None:
    policy = PinningPolicy()
    manager = make_manager(policy)
    with trio.fail_after(GUARD), DialFailures() as dial_failures:
        async with running_service(manager, sock_path) as service:
            async with Simulator.listen(sock_path) as sim:
                await sim.wait_plugin()
                p, c = pod(), container(1)
                await sim.run_pod_sandbox(p)
                await sim.create_container(p, c)
                state = list(sim.pods.values()), list(sim.containers.values())
            # The runtime is gone; the service keeps dialling until a new one listens.
            await dial_failures.reached(dial_failures.count + 2)
            pods, ctrs = state
            async with Simulator.listen(sock_path, pods=pods, containers=ctrs) as sim2:
                await sim2.wait_plugin()
                rsp = await sim2.create_container(p, container(2))
                assert rsp.adjust.linux.resources.cpu.cpus == "0-1"
            assert service.connections == 2
    # The second runtime's Synchronize restored the container created before the restart.
    assert policy.synced == [(0, 0), (1, 1)]


async def test_missing_socket_is_reported_once_and_stop_works(
    sock_path: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="nri_resmgr.nri.service")
    with trio.fail_after(GUARD), DialFailures() as dial_failures:
        async with running_service(make_manager(), sock_path) as service:
            await dial_failures.reached(3)  # three dial attempts, one warning
            await service.stop()
            await service.stop()  # idempotent
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    debugs = [r for r in caplog.records if "does not exist" in r.getMessage()]
    assert len(warnings) == 1
    assert "does not exist: is NRI enabled in the runtime?" in warnings[0].getMessage()
    assert len(debugs) > 1


@pytest.mark.parametrize(("request_timeout", "deadline"), [(2.0, 10.0), (60.0, 120.0)])
async def test_update_containers_waits_twice_the_runtimes_request_timeout_at_least_10s(
    sock_path: str, monkeypatch: pytest.MonkeyPatch, request_timeout: float, deadline: float
) -> None:
    """A runtime configured with long plugin timeouts (the real node's containerd under TCG:
    60 s) can take longer than 10 s to update 8 containers itself; a 10 s deadline there
    gave up on updates the runtime was still applying, and the containers never moved."""
    seen: list[float | None] = []
    call_raw = TtrpcClient.call_raw

    async def recording(
        self: TtrpcClient, service: str, method: str, payload: bytes, timeout: float | None
    ) -> bytes:
        if method == "UpdateContainers":
            seen.append(timeout)
        return await call_raw(self, service, method, payload, timeout)

    monkeypatch.setattr(TtrpcClient, "call_raw", recording)
    manager = make_manager()
    config = SimConfig(request_timeout=request_timeout)
    with trio.fail_after(GUARD):
        async with (
            Simulator.listen(sock_path, config, containers=[container(1)]) as sim,
            running_service(manager, sock_path),
        ):
            await sim.wait_plugin()
            await sim.next_update()  # the sync reply
            assert await manager.send_updates([Update("ctr1", Adjustment(cpuset_cpus="2"))]) == []
    assert seen == [deadline]
