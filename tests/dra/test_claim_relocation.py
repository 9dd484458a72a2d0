"""A per-CPU claim of a whole NUMA node while shared containers sit in that node's pool.

Found on a real cluster (4 NUMA nodes of 4 CPUs): the scheduler allocated cpu4..cpu7, all of
NUMA node #1, and Prepare refused ("would leave pool NUMA node #1 without a shared CPU"), so
the pod never started. The slice offered those CPUs: Prepare now moves the pool's shared
containers up to the nearest ancestor pool that holds them and gives the claim its CPUs.
N4C16: sockets 0-7 and 8-15, NUMA nodes of 4 CPUs, memory node n with NUMA node n; CPU 0
reserved.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.resmgr.model import Container
from tests.dra.claim_setup import Node, claim_object, make_node
from tests.policies.workload import besteffort, burstable, guaranteed

UID = "7a1c0e2f-3b4d-4c5e-8f60-718293a4b5c6"
NODE1 = CpuSet.parse("4-7")


def pool_of(node: Node, c: Container) -> str:
    a = node.policy.engine.allocation(c.id)
    assert a is not None
    return str(a.pool)


def placement(node: Node, c: Container) -> tuple[CpuSet, CpuSet]:
    cpus, mems = node.runtime.placement(c)
    return CpuSet.parse(cpus or ""), CpuSet.parse(mems or "")


async def prepare(node: Node, devices: list[str]) -> str:
    node.claims.add(claim_object(UID, devices))
    [outcome] = (await node.preparer.prepare([node.ref(UID)])).values()
    return outcome.error


def in_node1(node: Node) -> tuple[Container, Container]:
    """A BestEffort and a Burstable container, both placed in NUMA node #1's pool."""
    be = node.runtime.create(besteffort("be"))
    others = [node.runtime.create(besteffort(f"other{i}")) for i in range(3)]
    bu = node.runtime.create(burstable("bu", 500, 1000))
    # The premise (placement spreads them over the NUMA nodes), so a change of placement
    # makes this fail rather than test nothing.
    assert [pool_of(node, c) for c in (be, bu)] == ["NUMA node #1"] * 2
    assert "NUMA node #1" not in {pool_of(node, c) for c in others}
    return be, bu


async def test_a_whole_numa_claim_moves_the_pools_shared_containers_to_the_socket(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    node = make_node(tmp_path)
    be, bu = in_node1(node)
    assert placement(node, be) == (NODE1, CpuSet([1]))
    sent = len(node.updater.batches)

    with caplog.at_level(logging.INFO, "nri_resmgr.policies.topology_aware"):
        assert await prepare(node, ["cpu4", "cpu5", "cpu6", "cpu7"]) == ""
    # Each move is said once, when it is made.
    said = [r.getMessage() for r in caplog.records if "last shared CPUs" in r.getMessage()]
    assert sorted(said) == sorted(
        f"DRA claim {UID} took the last shared CPUs of pool NUMA node #1: container "
        f"default/{pod}/c0 moved to pool socket #0"
        for pod in ("be", "bu")
    )

    assert node.policy.claims.cpus() == {UID: NODE1}
    for c in (be, bu):
        assert pool_of(node, c) == "socket #0"
        # The socket's shared CPUs (CPU 0 reserved), none of the claim's; memory widened.
        assert placement(node, c) == (CpuSet.parse("1-3"), CpuSet.parse("0-1"))
    moved = {u.container_id for batch in node.updater.batches[sent:] for u in batch}
    assert {be.id, bu.id} <= moved
    # The claim's container gets the whole node.
    pod, c = besteffort("dra")
    claimed = node.runtime.create((pod, node.injected(c, UID)))
    assert node.runtime.cpus[claimed.id] == "4-7"

    # Unprepared, the claim's CPUs return to the socket, where the moved containers stay.
    node.runtime.remove(claimed)
    outcomes = await node.preparer.unprepare([node.ref(UID)])
    assert outcomes[UID].error == ""
    assert pool_of(node, be) == "socket #0"
    assert placement(node, be) == (CpuSet.parse("1-7"), CpuSet.parse("0-1"))


async def test_a_restart_restores_the_moved_containers_in_the_socket(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    be, bu = in_node1(node)
    assert await prepare(node, ["cpu4", "cpu5", "cpu6", "cpu7"]) == ""
    pod, c = besteffort("dra")
    claimed = node.runtime.create((pod, node.injected(c, UID)))
    before = {x.id: placement(node, x) for x in (be, bu, claimed)}

    again = node.restart()
    pods, containers = again.runtime.reported()
    async with again.manager.lock:
        updates = again.manager.synchronize(pods, containers)
    again.runtime.apply(updates)

    assert {x.id: placement(again, x) for x in (be, bu, claimed)} == before
    assert [pool_of(again, x) for x in (be, bu)] == ["socket #0"] * 2
    assert not {u.container_id for u in updates} & {be.id, bu.id, claimed.id}
    # A container created now stays off the claim, and the next one in NUMA node #1's pool
    # has no CPU there: it is not placed there.
    late = again.runtime.create(besteffort("late"))
    assert placement(again, late)[0].isdisjoint(NODE1)


async def test_the_nearest_ancestor_that_holds_them_takes_them(tmp_path: Path) -> None:
    """The socket keeps 3 shared CPUs, too few for 3.5 CPUs of requests: the root takes it."""
    node = make_node(tmp_path)
    big = node.runtime.create(burstable("big", 3500, 4000))
    assert pool_of(node, big) == "NUMA node #1"  # the premise

    assert await prepare(node, ["cpu4", "cpu5", "cpu6", "cpu7"]) == ""

    assert pool_of(node, big) == "root"
    assert placement(node, big) == (CpuSet.parse("1-3,8-15"), CpuSet.parse("0-3"))


async def test_with_no_ancestor_holding_them_the_nearest_with_a_cpu_is_over_committed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every CPU but 15 claimed: the root keeps one CPU, too few for 3.5 CPUs of requests,
    and takes the container anyway (as the engine over-commits a native one), logged."""
    node = make_node(tmp_path)
    big = node.runtime.create(burstable("big", 3500, 4000))
    assert pool_of(node, big) == "NUMA node #1"  # the premise

    assert await prepare(node, [f"cpu{n}" for n in range(1, 15)]) == ""

    assert pool_of(node, big) == "root"
    assert placement(node, big) == (CpuSet([15]), CpuSet.parse("0-3"))
    assert "shared CPUs of root over-committed to make room for a DRA claim" in caplog.text


async def test_exclusive_containers_stay_and_a_claim_on_them_is_refused(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    g = node.runtime.create(guaranteed("g", 1000))
    shared = [node.runtime.create(besteffort(f"be{i}")) for i in range(6)]
    [be] = [c for c in shared if pool_of(node, c) == "NUMA node #1"]  # the premise
    [held] = placement(node, g)[0]
    assert held in NODE1, "the premise: its CPU is in NUMA node #1"
    rest = NODE1 - CpuSet([held])
    error = await prepare(node, [f"cpu{n}" for n in (held, *rest)])
    assert "held exclusively by container" in error
    assert node.policy.claims.cpus() == {}

    # The rest of the node: the exclusive container keeps its CPU (and its pool), the shared
    # ones move up.
    node.claims.objects.clear()
    assert await prepare(node, [f"cpu{n}" for n in rest]) == ""
    assert placement(node, g)[0] == CpuSet([held])
    assert pool_of(node, g) == "NUMA node #1"
    assert pool_of(node, be) == "socket #0"
    assert placement(node, be)[0] == CpuSet.parse("1-3")


async def test_a_claim_that_would_empty_the_root_is_still_refused(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    be, _ = in_node1(node)
    before = placement(node, be)

    error = await prepare(node, [f"cpu{n}" for n in range(1, 16)])

    assert "and every pool above it without a shared CPU" in error
    assert node.policy.claims.cpus() == {}
    assert pool_of(node, be) == "NUMA node #1"
    assert placement(node, be) == before


async def test_an_exclusive_container_leaves_a_moved_besteffort_container_its_cpu(
    tmp_path: Path,
) -> None:
    """Found by the per-CPU state machine: claims left socket #0 one shared CPU (3), where a
    moved BestEffort container runs; a native 1-CPU container took CPU 3 from NUMA node #0,
    the socket's child, and left the BestEffort one none. An ancestor's containers that ask no
    CPU keep one, as the pool's own do: the exclusive CPU comes from NUMA node #3 instead."""
    node = make_node(tmp_path)
    be = node.runtime.create(besteffort("be"))
    assert pool_of(node, be) == "NUMA node #1"  # the premise
    for uid, cpus in (("1", "1"), ("2", "4-7"), ("3", "8-11"), ("4", "2,12-14")):
        node.claims.add(claim_object(f"{UID[:-1]}{uid}", [f"cpu{n}" for n in CpuSet.parse(cpus)]))
        [outcome] = (await node.preparer.prepare([node.ref(f"{UID[:-1]}{uid}")])).values()
        assert outcome.error == ""
    assert (pool_of(node, be), placement(node, be)[0]) == ("socket #0", CpuSet([3]))

    g = node.runtime.create(guaranteed("g", 1000))

    assert placement(node, g)[0] == CpuSet([15])
    assert placement(node, be)[0] == CpuSet([3])
