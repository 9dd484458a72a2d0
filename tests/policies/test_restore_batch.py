"""Synchronize's bulk shortcuts give what the one-at-a-time paths give.

Restore re-accounts memory with a lean commit (no release, no table of moves), stores the
containers it keeps on shared CPUs in one batch and reads each distinct cpuset text once;
these tests hold each to the plain path it replaces.
"""

from __future__ import annotations

import logging
from pathlib import Path

import attrs
import pytest

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.allocations import Allocation, AllocationCache, Kind
from nri_resmgr.policies.hardware import reported_cpuset
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from nri_resmgr.policies.topology_aware.memory import memory_want
from nri_resmgr.policies.topology_aware.memzones import MemoryAllocator
from nri_resmgr.resmgr.model import Container, ContainerState, Resources
from nri_resmgr.resmgr.policy import PolicyEnv
from nri_resmgr.sysfs import discover
from tests.policies.workload import Runtime, pod, resources, start, topology_spec
from tests.sysfs.fakesys import N6_HBM_CXL


def _memory_workload(rt: Runtime, dram: int) -> None:
    # Each asks 40 % of a DRAM node: the third in a node overcommits it and zones widen.
    for i in range(12):
        qos = "guaranteed" if i % 3 else "burstable"
        p = pod(f"m{i}", qos)
        c = Container(
            id=f"m{i}-c0",
            pod_id=p.id,
            name="c0",
            state=ContainerState.RUNNING,
            resources=resources(500, 500 if qos == "guaranteed" else 1000, dram * 2 // 5),
        )
        rt.create((p, c))


def test_memory_sync_equals_committing_one_at_a_time(tmp_path: Path) -> None:
    old = TopologyAwarePolicy()
    start(old, tmp_path, N6_HBM_CXL, topology_spec())
    system = discover(str(tmp_path))
    dram = min(n.memory for n in system.nodes.values() if n.cpus)
    rt = Runtime(old)
    _memory_workload(rt, dram)
    new = TopologyAwarePolicy()
    new.setup(topology_spec(), PolicyEnv(host_root=str(tmp_path)))
    pods, containers = rt.reported()
    new.synchronize(pods, containers)

    # The reference: the public commit, in the order and from the starts sync uses.
    ref = MemoryAllocator(system)
    engine = new.engine
    pool_mems = {p.name: p.mems for p in engine.pools}
    for a in sorted(engine.allocations(), key=lambda a: a.container_id):
        assert a.pod is not None and a.container is not None
        want = memory_want(a.pod, a.container, ref.available, ref.total)
        start_at = ref._restored_start(a.mems, pool_mems[a.pool], want)
        assert ref.commit(a.container_id, start_at, want) is not None
    restored = engine.memory.zones()
    assert restored == ref.zones()
    assert len(restored) == 12
    # The workload is one that widens zones, not only the trivial fits-where-it-starts case.
    assert any(len(zone) > 1 for zone in restored.values())


def test_memory_sync_reverts_what_does_not_fit(tmp_path: Path) -> None:
    p = TopologyAwarePolicy()
    start(p, tmp_path, N6_HBM_CXL, topology_spec())
    mem = p.engine.memory
    big = mem.total * 2  # fits nowhere
    huge = pod("huge", "guaranteed")
    c = Container(
        id="huge-c0",
        pod_id=huge.id,
        name="c0",
        state=ContainerState.RUNNING,
        resources=resources(500, 500, big),
    )
    want = memory_want(huge, c, mem.available, mem.total)
    assert mem._restore_request(c.id, p.engine.pools[0].mems, want) is False
    assert mem.zones() == {}
    assert mem.commit(c.id, p.engine.pools[0].mems, want) is None
    assert mem.zones() == {}


def test_reported_cpuset_is_parsed_once_and_bad_ones_logged_each_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    a = Container(id="a", pod_id="p", name="a", resources=Resources(cpuset_cpus="0-3,8"))
    b = attrs.evolve(a, id="b")
    first = reported_cpuset("0-3,8", a)
    assert first == CpuSet([0, 1, 2, 3, 8])
    assert reported_cpuset("0-3,8", b) is first  # shared: a CpuSet never changes
    with caplog.at_level(logging.WARNING):
        assert reported_cpuset("3-1", a) is None
        assert reported_cpuset("3-1", b) is None
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        "container a",
        "container b",
    ]


def _alloc(cid: str, pool: str, kind: Kind, request: int, exclusive: str = "") -> Allocation:
    return Allocation(cid, f"pod-{cid}", cid, pool, kind, request, CpuSet.parse(exclusive))


def test_put_all_equals_putting_one_at_a_time() -> None:
    before = [
        _alloc("x", "node0", Kind.SHARED, 100),
        _alloc("y", "node1", Kind.EXCLUSIVE, 2000, "4-5"),
    ]
    batch = [
        _alloc("a", "node0", Kind.SHARED, 0),
        _alloc("b", "node0", Kind.MIXED, 1500, "2"),
        _alloc("c", "node1", Kind.SHARED, 250),
        _alloc("r", "reserved", Kind.RESERVED, 100),
        _alloc("x", "node1", Kind.SHARED, 300),  # a replacement, moving pools
        _alloc("d", "node0", Kind.EXCLUSIVE, 1000, "3"),
    ]
    one, bulk = AllocationCache(), AllocationCache()
    for a in before:
        one.put(a)
        bulk.put(a)
    for a in batch:
        one.put(a)
    bulk.put_all(batch)
    assert bulk.loads() == one.loads()
    assert bulk.loads()["node0"].zero_requests == 1  # the totals are not trivially empty
    assert list(bulk) == list(one)
    assert {p: bulk.in_pool(p) for p in bulk.pool_names()} == {
        p: one.in_pool(p) for p in one.pool_names()
    }
    assert bulk.exclusive_cpus() == one.exclusive_cpus() == CpuSet.parse("2-5")
