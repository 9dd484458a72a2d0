"""Memory-aware topology-aware placement: memory types from sysfs, pool memory by type, the
memory-type annotation, and memory zones that widen when a request does not fit (libmem).

The n6-hbm-cxl cases replay nri-plugins' e2e ``topology-aware/n6-hbm-cxl/test01-memory-types``
on the same topology (``N6_HBM_CXL``): nodes 0-1 DRAM with CPUs, 2-3 HBM, 4-5 PMEM.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

import pytest

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from nri_resmgr.policies.topology_aware.numazones import NUMA_ZONE_TYPE
from nri_resmgr.resmgr.model import Container, ContainerState, Pod
from nri_resmgr.sysfs import MemoryType, discover
from tests.policies.workload import Runtime, pod, resources, start, topology_spec
from tests.sysfs.fakesys import GIB, N4C16, N6_HBM_CXL, Layout, MemoryNode, write_sysfs

P = "resource-policy.nri.io"
M = 1000 * 1000  # Kubernetes' "M"
DRAM0, DRAM1, HBM0, HBM1, PMEM0, PMEM1 = range(6)


def policy(tmp_path: Path, layout: Layout = N6_HBM_CXL) -> TopologyAwarePolicy:
    p = TopologyAwarePolicy()
    start(p, tmp_path, layout, topology_spec())
    return p


def make_pod(
    name: str,
    qos: str,
    count: int,
    milli: int,
    memory: int,
    annotations: Mapping[str, str] | None = None,
) -> tuple[Pod, list[Container]]:
    """A pod like upstream's e2e ``create <qos>`` template: containers <name>c0, c1, ..."""
    p = pod(name, qos, annotations=annotations)
    # Burstable ones get a CPU limit (twice the request): unlimited ones go to the
    # unlimitedBurstable level, not to the tightest pool.
    limit = milli if qos == "guaranteed" else 2 * milli
    containers = [
        Container(
            id=f"{name}c{i}",
            pod_id=p.id,
            name=f"{name}c{i}",
            state=ContainerState.RUNNING,
            resources=resources(milli, limit, memory),
        )
        for i in range(count)
    ]
    return p, containers


def create(rt: Runtime, p: Pod, containers: list[Container]) -> None:
    for c in containers:
        rt.create((p, c))


def mems(rt: Runtime, cid: str) -> set[int]:
    return set(CpuSet.parse(rt.mems[cid] or ""))


def package(rt: Runtime, cid: str) -> int:
    cpus = CpuSet.parse(rt.cpus[cid] or "")
    packages = {0 if c < 4 else 1 for c in cpus}
    assert len(packages) == 1, f"{cid} spans packages: {cpus}"
    return packages.pop()


def on_own_package(rt: Runtime, cid: str, node0: set[int], node1: set[int]) -> None:
    """Upstream's ``mems[c] == X0 if packages[c] == {"package0"} else mems[c] == X1``."""
    expected = node0 if package(rt, cid) == 0 else node1
    assert mems(rt, cid) == expected, (cid, rt.cpus[cid], rt.mems[cid])


# -- sysfs -------------------------------------------------------------------------------


def test_cpuless_nodes_are_hbm_below_the_average_dram_node_else_pmem(tmp_path: Path) -> None:
    system = discover(str(write_sysfs(tmp_path, N6_HBM_CXL)))
    types = {n.id: n.memory_type for n in system.nodes.values()}
    assert types == {
        0: MemoryType.DRAM,
        1: MemoryType.DRAM,
        2: MemoryType.HBM,
        3: MemoryType.HBM,
        4: MemoryType.PMEM,
        5: MemoryType.PMEM,
    }
    assert [system.attached_cpu_nodes(n) for n in range(6)] == [
        CpuSet([0]),
        CpuSet([1]),
        CpuSet([0]),
        CpuSet([1]),
        CpuSet([0]),
        CpuSet([1]),
    ]
    assert system.memory_types() == MemoryType.DRAM | MemoryType.PMEM | MemoryType.HBM


def test_a_cpuless_node_as_big_as_the_dram_nodes_is_pmem(tmp_path: Path) -> None:
    layout = Layout(packages=2, memory_nodes=(MemoryNode(2 * GIB, {0: 17, 1: 28}),))
    system = discover(str(write_sysfs(tmp_path, layout)))
    assert system.nodes[2].memory_type is MemoryType.PMEM
    assert system.nodes[2].cpus == CpuSet()
    assert system.nodes[0].distances == {0: 10, 1: 21, 2: 17}
    assert system.attached_cpu_nodes(2) == CpuSet([0])


def test_sparse_cpu_ids_with_cpuless_memory(tmp_path: Path) -> None:
    layout = Layout(
        packages=2,
        cores_per_node=2,
        cpu_ids=(0, 2, 64, 66),
        memory_nodes=(MemoryNode(GIB, {0: 30, 1: 15}),),
    )
    system = discover(str(write_sysfs(tmp_path, layout)))
    assert system.online == CpuSet([0, 2, 64, 66])
    assert system.nodes[1].cpus == CpuSet([64, 66])
    assert system.nodes[2].memory_type is MemoryType.HBM
    p = policy(tmp_path / "p", layout)
    assert {x.name: str(x.mems) for x in p.engine.pools} == {
        "root": "0-2",
        "socket #0": "0",
        "socket #1": "1-2",
    }


def test_machines_without_special_memory_are_all_dram(tmp_path: Path) -> None:
    system = discover(str(write_sysfs(tmp_path, N4C16)))
    assert {n.memory_type for n in system.nodes.values()} == {MemoryType.DRAM}


# -- pools -------------------------------------------------------------------------------


def test_pools_get_the_memory_closest_to_their_cpus(tmp_path: Path) -> None:
    # upstream test04-nrt: "socket #0" memory set 0,2,4; "socket #1" 1,3,5; root 0-5.
    p = policy(tmp_path)
    assert {x.name: str(x.mems) for x in p.engine.pools} == {
        "root": "0-5",
        "socket #0": "0,2,4",
        "socket #1": "1,3,5",
    }


# -- upstream test01-memory-types ----------------------------------------------------------


def test_e2e_n6_hbm_cxl_test01_memory_types(tmp_path: Path) -> None:
    rt = Runtime(policy(tmp_path))
    key = f"memory-type.{P}/container"
    pod0, c0 = make_pod(
        "pod0",
        "guaranteed",
        4,
        100,
        512 * M,
        {f"{key}.pod0c1": "dram", f"{key}.pod0c2": "hbm", f"{key}.pod0c3": "pmem"},
    )
    create(rt, pod0, c0)
    on_own_package(rt, "pod0c0", {DRAM0, PMEM0}, {DRAM1, PMEM1})
    on_own_package(rt, "pod0c1", {DRAM0}, {DRAM1})
    on_own_package(rt, "pod0c2", {HBM0}, {HBM1})
    on_own_package(rt, "pod0c3", {PMEM0}, {PMEM1})
    for c in c0:
        rt.remove(c)

    pod1, c1 = make_pod(
        "pod1",
        "guaranteed",
        4,
        100,
        2816 * M,
        {
            f"{key}.pod1c0": "hbm,dram",
            f"{key}.pod1c1": "hbm,dram",
            f"{key}.pod1c2": "pmem",
            f"{key}.pod1c3": "pmem",
        },
    )
    create(rt, pod1, c1)

    def pod1_placed() -> None:
        on_own_package(rt, "pod1c0", {HBM0, DRAM0}, {HBM1, DRAM1})
        on_own_package(rt, "pod1c1", {HBM0, DRAM0}, {HBM1, DRAM1})
        on_own_package(rt, "pod1c2", {PMEM0}, {PMEM1})
        on_own_package(rt, "pod1c3", {PMEM0}, {PMEM1})

    pod1_placed()
    # 2.6G + 2.6G of PMEM used, 1.4G + 1.4G left: 2G more PMEM fits no single PMEM node, so
    # the newest, smallest request spreads over both.
    pod2, c2 = make_pod("pod2", "guaranteed", 1, 100, 2000 * M, {f"{key}.pod2c0": "pmem"})
    create(rt, pod2, c2)
    pod1_placed()
    assert mems(rt, "pod2c0") == {PMEM0, PMEM1}


# -- memory that does not fit a node ---------------------------------------------------------


def test_memory_bigger_than_a_node_gets_a_wider_zone(tmp_path: Path) -> None:
    # n4c16: 2G per NUMA node. 3G fits no node: the zone widens to the closest node (same
    # socket); the CPUs stay in one NUMA node's pool.
    rt = Runtime(policy(tmp_path, N4C16))
    p, cs = make_pod("big", "guaranteed", 1, 1000, 3 * GIB)
    create(rt, p, cs)
    cpus = CpuSet.parse(rt.cpus["bigc0"] or "")
    node = 0 if cpus.issubset(CpuSet(range(4))) else None
    assert len(cpus) == 1
    assert mems(rt, "bigc0") in ({0, 1}, {2, 3}), rt.mems["bigc0"]
    assert node is None or mems(rt, "bigc0") == {0, 1}
    # 5G fits no socket either: all four nodes.
    p, cs = make_pod("huge", "guaranteed", 1, 100, 5 * GIB)
    create(rt, p, cs)
    assert mems(rt, "hugec0") == {0, 1, 2, 3}


def test_memory_that_fits_stays_on_its_node(tmp_path: Path) -> None:
    rt = Runtime(policy(tmp_path, N4C16))
    p, cs = make_pod("small", "guaranteed", 1, 1000, GIB)
    create(rt, p, cs)
    assert len(mems(rt, "smallc0")) == 1


def test_a_full_node_makes_new_containers_go_elsewhere(tmp_path: Path) -> None:
    # Every NUMA node but one is filled; the next 1.5G container is placed on the free one.
    rt = Runtime(policy(tmp_path, N4C16))
    used: set[int] = set()
    for i in range(3):
        p, cs = make_pod(f"fill{i}", "guaranteed", 1, 1000, 1800 * M)
        create(rt, p, cs)
        got = mems(rt, f"fill{i}c0")
        assert len(got) == 1 and not got & used, (i, got, used)
        used |= got
    p, cs = make_pod("next", "guaranteed", 1, 1000, 1500 * M)
    create(rt, p, cs)
    assert mems(rt, "nextc0") == {0, 1, 2, 3} - used


def test_lower_priority_memory_moves_out_and_is_updated(tmp_path: Path) -> None:
    # One socket, two NUMA nodes of 2G. A Guaranteed 1.2G takes one node; a Burstable 1.5G
    # the other; a Guaranteed 1G then fits the Burstable's node only by moving the Burstable
    # (lower priority) to a zone of both nodes: the runtime gets an update for it.
    layout = Layout(packages=1, nodes_per_die=2, cores_per_node=2, threads=2)
    rt = Runtime(policy(tmp_path, layout))
    g, gs = make_pod("g", "guaranteed", 1, 100, 1200 * M)
    create(rt, g, gs)
    b, bs = make_pod("b", "burstable", 1, 100, 1500 * M)
    create(rt, b, bs)
    home = mems(rt, "bc0")
    assert len(home) == 1 and home != mems(rt, "gc0")
    n, ns = make_pod("n", "guaranteed", 1, 100, GIB)
    create(rt, n, ns)
    assert mems(rt, "nc0") == home
    assert "bc0" in rt.updated
    assert mems(rt, "bc0") == {0, 1}
    assert mems(rt, "gc0") != {0, 1}


def test_released_memory_is_free_again(tmp_path: Path) -> None:
    rt = Runtime(policy(tmp_path, N4C16))
    p, cs = make_pod("a", "guaranteed", 1, 1000, 1900 * M)
    create(rt, p, cs)
    first = mems(rt, "ac0")
    rt.remove(cs[0])
    engine = rt.policy.engine  # type: ignore[attr-defined]
    assert engine.memory.zones() == {}
    assert engine.memory.usage(0b1111) == 0
    p, cs = make_pod("b", "guaranteed", 1, 1000, 1900 * M)
    create(rt, p, cs)
    assert mems(rt, "bc0") == first


# -- the annotation --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({f"memory-type.{P}/pod": "hbm"}, ({HBM0}, {HBM1})),
        ({f"memory-type.{P}": "PMEM"}, ({PMEM0}, {PMEM1})),
        ({f"memory-type.{P}/pod": "hbm", f"memory-type.{P}/container.cc0": "dram"}, ({0}, {1})),
        ({f"memory-type.{P}/pod": "dram,pmem,hbm"}, ({0, 2, 4}, {1, 3, 5})),
    ],
)
def test_memory_type_annotation_scopes(
    tmp_path: Path, annotations: dict[str, str], expected: tuple[set[int], set[int]]
) -> None:
    rt = Runtime(policy(tmp_path))
    p, cs = make_pod("c", "guaranteed", 1, 100, 100 * M, annotations)
    create(rt, p, cs)
    on_own_package(rt, "cc0", *expected)


def test_unknown_memory_type_is_reported_and_the_default_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rt = Runtime(policy(tmp_path))
    p, cs = make_pod("c", "guaranteed", 1, 100, 100 * M, {f"memory-type.{P}/pod": "dram,flash"})
    with caplog.at_level(logging.ERROR):
        create(rt, p, cs)
    assert "unknown memory type 'flash'" in caplog.text
    on_own_package(rt, "cc0", {DRAM0, PMEM0}, {DRAM1, PMEM1})


def test_a_type_the_machine_lacks_falls_back_to_what_it_has(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rt = Runtime(policy(tmp_path, N4C16))
    p, cs = make_pod("c", "guaranteed", 1, 1000, 100 * M, {f"memory-type.{P}/pod": "hbm"})
    with caplog.at_level(logging.WARNING):
        create(rt, p, cs)
    assert "no memory of the wanted types" in caplog.text
    assert len(mems(rt, "cc0")) == 1


def test_restart_rebuilds_memory_zones(tmp_path: Path) -> None:
    rt = Runtime(policy(tmp_path))
    key = f"memory-type.{P}/pod"
    p, cs = make_pod("a", "guaranteed", 2, 100, 2816 * M, {key: "pmem"})
    create(rt, p, cs)
    fresh = policy(tmp_path / "again")
    pods, containers = rt.reported()
    fresh.synchronize(pods, containers)
    zones = fresh.engine.memory.zones()
    assert sorted(str(z) for z in zones.values()) == ["4", "5"]


def test_restart_keeps_a_spread_zone(tmp_path: Path) -> None:
    rt = Runtime(policy(tmp_path))
    key = f"memory-type.{P}/pod"
    p, cs = make_pod("a", "guaranteed", 2, 100, 2816 * M, {key: "pmem"})
    create(rt, p, cs)
    p, cs = make_pod("b", "guaranteed", 1, 100, 2000 * M, {key: "pmem"})
    create(rt, p, cs)
    assert mems(rt, "bc0") == {PMEM0, PMEM1}
    fresh = policy(tmp_path / "again")
    pods, containers = rt.reported()
    updates = fresh.synchronize(pods, containers)
    assert [u for u in updates if u.adjustment.cpuset_mems] == []
    assert str(fresh.engine.memory.zones()["bc0"]) == "4-5"


def test_memory_beyond_the_machine_is_over_committed_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Like CPUs, memory is over-committed rather than failing the container (kubelet admits
    # pods by memory, so this is a machine whose memory is used outside Kubernetes too).
    rt = Runtime(policy(tmp_path, N4C16))
    p, cs = make_pod("all", "guaranteed", 1, 100, 8 * GIB)
    create(rt, p, cs)
    p, cs = make_pod("more", "guaranteed", 1, 1000, GIB)
    with caplog.at_level(logging.WARNING):
        create(rt, p, cs)
    assert "fit no zone" in caplog.text
    engine = rt.policy.engine  # type: ignore[attr-defined]
    assert "morec0" not in engine.memory.zones()
    pool = engine.pools[engine.supply.index[engine.allocation("morec0").pool]]
    assert mems(rt, "morec0") == set(pool.mems)


# -- upstream test02-fuzz-memallocs ----------------------------------------------------------

# The inputs of upstream's fuzz.aal: name, containers, mCPU (request, limit), memory (bytes;
# the limit), memory-type annotation, QoS, namespace.
FUZZ_INPUTS = [
    ("gu0", 1, 200, 200, 1500 * M, "", "guaranteed", "default"),
    ("gu1", 2, 1000, 1000, 500 * M, "", "guaranteed", "default"),
    ("gu1hbm", 2, 1000, 1000, 500 * M, "hbm", "guaranteed", "default"),
    ("gu2", 2, 1200, 1200, 4500 * M, "", "guaranteed", "default"),
    ("gu2pmem", 2, 1200, 1200, 4500 * M, "pmem", "guaranteed", "default"),
    ("gu3", 3, 2000, 2000, 500 * M, "", "guaranteed", "default"),
    ("gu3dram", 3, 2000, 2000, 500 * M, "dram", "guaranteed", "default"),
    ("gu4", 1, 4200, 4200, 100 * M, "", "guaranteed", "default"),
    ("bu0", 1, 900, 1200, 50 * M, "", "burstable", "default"),
    ("bu0hbmpmem", 1, 900, 1200, 50 * M, "hbm,pmem", "burstable", "default"),
    ("bu1", 2, 1800, 1900, 300 * M, "", "burstable", "default"),
    ("bu1hbmdram", 2, 1800, 1900, 300 * M, "hbm,dram", "burstable", "default"),
    ("be0", 1, 0, None, 0, "", "besteffort", "default"),
    ("be1", 3, 0, None, 0, "", "besteffort", "default"),
    ("rgu0", 2, 100, 100, 1000 * M, "", "guaranteed", "kube-system"),
    ("rgu0pmem", 2, 100, 100, 1000 * M, "pmem", "guaranteed", "kube-system"),
    ("rbu0", 1, 99, 100, 100 * M, "", "burstable", "kube-system"),
    ("rbe0", 2, 0, None, 0, "", "besteffort", "kube-system"),
]
# generate.sh defaults: memory and (reserved) CPU available to the test pods.
FUZZ_MAX_MEM, FUZZ_MAX_CPU, FUZZ_MAX_RESERVED = 11000 * M, 7000, 1000


def _fuzz_pod(entry: tuple[object, ...]) -> tuple[Pod, list[Container]]:
    name, count, request, limit, memory, mtype, qos, namespace = entry
    assert isinstance(name, str) and isinstance(count, int) and isinstance(request, int)
    assert isinstance(memory, int) and isinstance(mtype, str) and isinstance(qos, str)
    assert isinstance(namespace, str) and (limit is None or isinstance(limit, int))
    annotations = {f"memory-type.{P}/pod": mtype} if mtype else {}
    p = pod(name, qos, namespace=namespace, annotations=annotations)
    containers = [
        Container(
            id=f"{name}c{i}",
            pod_id=p.id,
            name=f"{name}c{i}",
            state=ContainerState.RUNNING,
            resources=resources(request, limit, memory or None),
        )
        for i in range(count)
    ]
    return p, containers


def _check_memory(rt: Runtime, wanted: dict[str, MemoryType]) -> None:
    """Every container has memory; an accounted one exactly its zone, holding memory of the
    wanted types (a zone widened to resolve an overcommit may add others: upstream's requests
    are preferences, not strict); no zone holds more than its nodes."""
    engine = rt.policy.engine  # type: ignore[attr-defined]
    alloc = engine.memory
    system = engine.system
    zones = alloc.zones()
    for cid, types in wanted.items():
        got = CpuSet.parse(rt.mems[cid] or "")
        assert got, cid
        if cid in zones:
            assert got == zones[cid], (cid, got, zones[cid])
            assert any(system.nodes[n].memory_type & types for n in got), (cid, got, types)
    for zone in {z for z in zones.values()}:
        mask = sum(1 << n for n in zone)
        assert alloc.free(mask) >= 0, f"zone {zone} overcommitted"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_e2e_n6_hbm_cxl_test02_fuzz_memallocs(tmp_path: Path, seed: int) -> None:
    import random

    rng = random.Random(seed)
    rt = Runtime(policy(tmp_path))
    live: dict[str, tuple[tuple[object, ...], list[Container]]] = {}
    wanted: dict[str, MemoryType] = {}
    mem = cpu = reserved = 0
    for _ in range(100):
        entry = rng.choice(FUZZ_INPUTS)
        name, count, request, _limit, memory, mtype, _qos, namespace = entry
        assert isinstance(count, int) and isinstance(request, int) and isinstance(memory, int)
        if name in live:
            _, containers = live.pop(str(name))
            for c in containers:
                rt.remove(c)
                wanted.pop(c.id)
            mem -= memory * count
            if namespace == "kube-system":
                reserved -= request * count
            else:
                cpu -= request * count
        else:
            room = (
                FUZZ_MAX_RESERVED - reserved if namespace == "kube-system" else FUZZ_MAX_CPU - cpu
            )
            if mem + memory * count >= FUZZ_MAX_MEM or request * count >= room:
                continue
            p, containers = _fuzz_pod(entry)
            create(rt, p, containers)
            live[str(name)] = (entry, containers)
            types = MemoryType.parse(str(mtype)) if mtype else MemoryType.DRAM | MemoryType.PMEM
            for c in containers:
                wanted[c.id] = types
            mem += memory * count
            if namespace == "kube-system":
                reserved += request * count
            else:
                cpu += request * count
        _check_memory(rt, wanted)


def test_e2e_n6_hbm_cxl_test04_nrt_memory_sets(tmp_path: Path) -> None:
    # upstream test04-nrt's "memory set" zone attributes (its shared/reserved cpusets depend on
    # the reserved-CPU choice of upstream's CPU allocator, replayed elsewhere).
    p = policy(tmp_path)
    # The pool zones, upstream's; the `Node` zones for NodeResourceTopologyMatch come after.
    pools = [z for z in p.topology_zones() if z.type != NUMA_ZONE_TYPE]
    memory_set = {z.name: dict(z.attributes)["memory set"] for z in pools}
    assert memory_set == {"root": "0-5", "socket #0": "0,2,4", "socket #1": "1,3,5"}
