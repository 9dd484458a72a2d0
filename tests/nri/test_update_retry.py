"""Failed unsolicited updates are retried with backoff (``nri_resmgr.resmgr.retry``).

The manager, the real topology-aware policy and a fake runtime that fails a given number of
UpdateContainers calls; trio's autojump clock runs the backoff (virtual time, no sleeping,
nothing asserted about time).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.instrumentation import metrics
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from nri_resmgr.resmgr.manager import ResourceManager
from nri_resmgr.resmgr.model import Container, Pod, Update
from nri_resmgr.resmgr.policy import PolicyEnv
from nri_resmgr.resmgr.retry import GIVE_UP_AFTER
from tests.policies.workload import besteffort, guaranteed, topology_spec
from tests.sysfs.fakesys import ONE_SOCKET_4CPU, write_sysfs

A_DAY = 24 * 3600.0  # of virtual time: far past every backoff


class FlakyRuntime:
    """Fails the first ``failures`` UpdateContainers calls whole, then applies them."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls: list[list[tuple[str, str | None]]] = []
        self.cpus: dict[str, str | None] = {}
        self._called = trio.Event()

    async def update_containers(self, updates: Sequence[Update]) -> list[Update]:
        self.calls.append([(u.container_id, u.adjustment.cpuset_cpus) for u in updates])
        self._called.set()
        self._called = trio.Event()
        if len(self.calls) <= self.failures:
            return list(updates)
        for u in updates:
            self.cpus[u.container_id] = u.adjustment.cpuset_cpus
        return []

    async def called(self, n: int) -> None:
        while len(self.calls) < n:
            await self._called.wait()


def setup(
    tmp_path: Path, failures: int
) -> tuple[TopologyAwarePolicy, ResourceManager, FlakyRuntime]:
    write_sysfs(tmp_path, ONE_SOCKET_4CPU)
    p = TopologyAwarePolicy()
    manager = ResourceManager(p, topology_spec(reserved="cpuset:0"), PolicyEnv(str(tmp_path)))
    runtime = FlakyRuntime(failures)
    manager.attach_runtime(runtime)
    return p, manager, runtime


async def create(manager: ResourceManager, name: str) -> tuple[Pod, Container]:
    pod, ctr = besteffort(name)
    async with manager.lock:
        manager.create_container(pod, ctr)
    return pod, ctr


@asynccontextmanager
async def retrying(manager: ResourceManager) -> AsyncIterator[None]:
    """The retry loop runs (as the NRI session runs it) for the body, a day of virtual time
    at most, then stops."""
    with trio.fail_after(2 * A_DAY):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(manager.retry_failed_updates)
            yield
            nursery.cancel_scope.cancel()


def retries_counted() -> dict[str, float]:
    """``nri_resmgr_nri_update_retries_total`` by outcome (metrics switched on)."""
    prom = metrics.enable()
    outcomes = ("failed", "ok", "dropped", "given_up")
    return {o: prom.UPDATE_RETRIES.labels(o)._value.get() for o in outcomes}


def counted_since(before: dict[str, float]) -> dict[str, float]:
    return {k: v - before[k] for k, v in retries_counted().items() if v != before[k]}


def runtime_cpus(p: TopologyAwarePolicy, cid: str) -> CpuSet | None:
    a = p.engine.allocation(cid)
    return None if a is None else a.cpus


async def test_a_failed_update_is_retried_until_the_container_has_the_policys_current_cpuset(
    tmp_path: Path, autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="nri_resmgr.resmgr.retry")
    p, manager, runtime = setup(tmp_path, failures=3)
    _, be = await create(manager, "be")
    before = retries_counted()
    async with retrying(manager):
        await manager.reconfigure(topology_spec(reserved="cpuset:3"))  # wants 0-2: fails
        # It moves again before any retry: the retry sends where it is wanted now.
        await manager.reconfigure(topology_spec(reserved="cpuset:2"))  # wants 0-1,3: fails
        await runtime.called(4)  # the first retry fails, the second is applied
        await trio.testing.wait_all_tasks_blocked()
        assert manager.retry.pending() == []
    assert runtime.calls == [[(be.id, "0-2")]] + [[(be.id, "0-1,3")]] * 3
    assert runtime.cpus == {be.id: "0-1,3"}
    assert runtime_cpus(p, be.id) == CpuSet.parse("0-1,3")  # the policy believes it now
    records = [(r.levelname, r.getMessage()) for r in caplog.records if be.id in r.getMessage()]
    assert [lvl for lvl, _ in records] == ["WARNING", "INFO"]  # once each, not per failure
    assert "retrying with backoff" in records[0][1]
    assert "updated on retry 2" in records[1][1]
    assert counted_since(before) == {"failed": 3, "ok": 1}


async def test_a_container_removed_while_its_retries_are_pending_is_dropped(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    p, manager, runtime = setup(tmp_path, failures=10**6)
    pod, be = await create(manager, "be")
    before = retries_counted()
    async with retrying(manager):
        await manager.reconfigure(topology_spec(reserved="cpuset:3"))
        await runtime.called(2)  # the failure and one failed retry
        async with manager.lock:  # as the NRI server runs RemoveContainer
            assert manager.remove_container(pod, be) == []
        await trio.sleep(A_DAY)
        assert manager.retry.pending() == []
    assert len(runtime.calls) == 2  # nothing was sent for it after its removal
    assert p.engine.allocation(be.id) is None
    assert counted_since(before) == {"failed": 2, "dropped": 1}


async def test_retries_of_an_update_that_keeps_failing_end_and_the_next_update_tries_again(
    tmp_path: Path, autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """A runtime that keeps failing a container (one that reports containers it no longer
    has as failed, say) is not asked for ever; the policy still holds the cpuset as unknown."""
    p, manager, runtime = setup(tmp_path, failures=10**6)
    _, be = await create(manager, "be")
    before = retries_counted()
    async with retrying(manager):
        await manager.reconfigure(topology_spec(reserved="cpuset:3"))
        await trio.sleep(A_DAY)
        assert counted_since(before) == {"failed": 1 + GIVE_UP_AFTER, "given_up": 1}
        assert len(runtime.calls) == 1 + GIVE_UP_AFTER
        assert manager.retry.pending() == []
        assert runtime_cpus(p, be.id) is None
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1 and "giving up updating container" in errors[0].getMessage()
        # The next update the policy makes includes it again, and retries start anew.
        await manager.reconfigure(topology_spec(reserved="cpuset:2"))
        assert runtime.calls[-1] == [(be.id, "0-1,3")]
        assert manager.retry.pending() == [be.id]


async def test_a_container_moved_by_a_later_reply_is_not_sent_its_stale_cpuset(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    p, manager, runtime = setup(tmp_path, failures=1)
    _, be = await create(manager, "be")
    async with retrying(manager):
        await manager.reconfigure(topology_spec(reserved="cpuset:3"))  # 0-2: fails
        async with manager.lock:  # a CreateContainer whose reply moves "be" again
            _, moved = manager.create_container(*guaranteed("g", 1000))
        assert [u.container_id for u in moved] == [be.id]
        runtime.cpus[be.id] = moved[0].adjustment.cpuset_cpus  # the runtime applies it
        await trio.sleep(A_DAY)
        assert manager.retry.pending() == []
    assert runtime.calls == [[(be.id, "0-2")]]  # the stale 0-2 was never sent again
    assert runtime.cpus[be.id] == str(runtime_cpus(p, be.id))


async def test_detaching_the_runtime_forgets_pending_retries(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    _, manager, _ = setup(tmp_path, failures=10**6)
    await create(manager, "be")
    await manager.reconfigure(topology_spec(reserved="cpuset:3"))
    assert len(manager.retry.pending()) == 1
    manager.attach_runtime(None)  # the connection ended: its Synchronize will tell the truth
    assert manager.retry.pending() == []
