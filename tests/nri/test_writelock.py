"""The NRI write lock: exclusive, first come first served, and no yield when free."""

from __future__ import annotations

import trio
import trio.testing

from nri_resmgr.nri.writelock import WriteLock


async def test_writers_hold_the_lock_one_at_a_time_in_arrival_order() -> None:
    lock = WriteLock()
    order: list[str] = []
    release = trio.Event()  # the barrier: every writer holds the lock until it is set

    async def writer(name: str) -> None:
        async with lock:
            order.append(f"{name} in")
            await release.wait()
            order.append(f"{name} out")

    async with trio.open_nursery() as nursery:
        for name in "abc":
            nursery.start_soon(writer, name)
            await trio.testing.wait_all_tasks_blocked()
        assert order == ["a in"]  # b and c wait while a holds the lock
        release.set()
    assert order == ["a in", "a out", "b in", "b out", "c in", "c out"]
    assert not lock.locked()


async def test_a_free_lock_is_taken_without_a_trip_through_the_scheduler() -> None:
    lock = WriteLock()
    with trio.testing.assert_no_checkpoints():
        async with lock:
            assert lock.locked()
    assert not lock.locked()


async def test_a_waiter_cancelled_while_parked_does_not_get_the_lock() -> None:
    lock = WriteLock()
    got: list[str] = []

    async def waiter(name: str, task_status: trio.TaskStatus[trio.CancelScope]) -> None:
        with trio.CancelScope() as scope:
            task_status.started(scope)
            async with lock:
                got.append(name)

    async with trio.open_nursery() as nursery, lock:
        first = await nursery.start(waiter, "first")
        await nursery.start(waiter, "second")
        await trio.testing.wait_all_tasks_blocked()
        first.cancel()
        await trio.testing.wait_all_tasks_blocked()
    assert got == ["second"]
    assert not lock.locked()


async def test_acquire_nowait_takes_a_free_lock_and_refuses_a_held_one() -> None:
    lock = WriteLock()
    assert lock.acquire_nowait()
    assert lock.locked()
    assert not lock.acquire_nowait()
    lock.release()
    assert not lock.locked()
    assert lock.acquire_nowait()


async def test_a_lock_taken_at_once_is_handed_to_a_waiter_on_release() -> None:
    lock = WriteLock()
    got: list[str] = []

    async def waiter() -> None:
        async with lock:
            got.append("waiter")

    assert lock.acquire_nowait()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        assert got == []
        lock.release()  # from another task than the one that will hold it next
        assert lock.locked(), "ownership passes straight to the waiter"
    assert got == ["waiter"]
    assert not lock.locked()
