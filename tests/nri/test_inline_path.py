"""Container events answered in the ttrpc reader's task (no handler task) while the manager
lock is free, and on the task path, in arrival order, while someone else holds it."""

from __future__ import annotations

import trio
import trio.testing

from nri_resmgr.resmgr.model import Adjustment, Container, Pod, Update
from nri_resmgr.sim.runtime import Simulator
from tests.nri.helpers import PinningPolicy, container, make_manager, pod, running_service

GUARD = 10  # a hang guard only


class TaskRecordingPolicy(PinningPolicy):
    """Records, per created container, the trio task the policy was called in."""

    def __init__(self) -> None:
        super().__init__()
        self.created: list[tuple[str, trio.lowlevel.Task]] = []

    def create_container(self, pod: Pod, container: Container) -> tuple[Adjustment, list[Update]]:
        self.created.append((container.id, trio.lowlevel.current_task()))
        return super().create_container(pod, container)


async def test_events_are_answered_in_the_reader_task_when_the_lock_is_free(
    sock_path: str,
) -> None:
    policy = TaskRecordingPolicy()
    manager = make_manager(policy)
    with trio.fail_after(GUARD):
        async with Simulator.listen(sock_path) as sim, running_service(manager, sock_path):
            await sim.wait_plugin()
            await sim.run_pod_sandbox(pod())
            replies = [await sim.create_container(pod(), container(i)) for i in range(3)]
    assert [r.adjust.linux.resources.cpu.cpus for r in replies] == ["0-1"] * 3
    tasks = {task for _, task in policy.created}
    assert len(tasks) == 1, "one task, the reader's, answered every create"
    [reader] = tasks
    assert "Mux.run" in reader.name


async def test_with_the_lock_held_events_wait_on_the_task_path_and_keep_their_order(
    sock_path: str,
) -> None:
    policy = TaskRecordingPolicy()
    manager = make_manager(policy)
    with trio.fail_after(GUARD):
        async with Simulator.listen(sock_path) as sim, running_service(manager, sock_path):
            await sim.wait_plugin()
            await sim.run_pod_sandbox(pod())
            # The lock held as a DRA claim preparation holds it.
            async with trio.open_nursery() as nursery, manager.lock:
                for i in range(3):
                    nursery.start_soon(sim.create_container, pod(), container(i))
                    await trio.testing.wait_all_tasks_blocked()
                assert policy.created == [], "nothing decided while the lock is held"
            # After the lock: a free lock again, so the next one is answered inline.
            await sim.create_container(pod(), container(3))
    assert [cid for cid, _ in policy.created] == ["ctr0", "ctr1", "ctr2", "ctr3"]
    handler_tasks = [task for _, task in policy.created[:3]]
    assert len(set(handler_tasks)) == 3, "each waiting create got its own handler task"
    assert all("_handle" in task.name for task in handler_tasks)
    assert "Mux.run" in policy.created[3][1].name
    assert {c.id for c in manager.containers.values()} == {f"ctr{i}" for i in range(4)}
