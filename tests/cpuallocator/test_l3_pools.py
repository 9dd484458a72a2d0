"""L3-cache pools in the topology-aware pool tree (nri-plugins ``pools.go``
buildPoolsByTopology: an L3 pool level under the deepest of socket, die and NUMA node that
wholly holds more than one L3 cache), and the placements that follow from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from nri_resmgr.policies.topology_aware.pools import build_pools
from nri_resmgr.resmgr.model import Container
from nri_resmgr.resmgr.policy import PolicyEnv
from nri_resmgr.sim.synthetic import Layout, write_sysfs
from nri_resmgr.sim.synthetic_cpu import CacheSpec, write_caches
from nri_resmgr.sysfs import discover
from tests.cpuallocator.machines import MACHINES
from tests.policies.workload import Runtime, burstable, guaranteed, topology_spec


def _machine_root(tmp_path: Path, name: str) -> Path:
    return next(m for m in MACHINES if m.name == name).write(tmp_path)


def test_n4c128_test19_caches_give_four_l3_pools_per_numa_node_ordered_by_cache_id(
    tmp_path: Path,
) -> None:
    pools = build_pools(discover(str(_machine_root(tmp_path, "n4c128-l3"))))
    l3 = [p for p in pools if p.level == "l3cache"]
    assert len(l3) == 16
    assert all(len(p.cpus) == 8 and pools[p.parent or 0].level == "numa" for p in l3)
    # test19's OVERRIDE_SYS_CACHES numbers 48-55 as cache 4 and 32-39 as cache 12, so in
    # NUMA node 1 the pools come in id order, not CPU order (as upstream's L3CacheIDs sorts).
    node1 = [p for p in l3 if pools[p.parent or 0].name == "NUMA node #1"]
    assert [p.name for p in node1] == [
        "NUMA node #1/L3 cache #4",
        "NUMA node #1/L3 cache #6",
        "NUMA node #1/L3 cache #12",
        "NUMA node #1/L3 cache #14",
    ]
    assert [str(p.cpus) for p in node1] == ["48-55", "56-63", "32-39", "40-47"]
    assert all(p.mems == CpuSet([1]) for p in node1)


def test_a_single_numa_socket_gets_its_l3_pools_directly_under_the_socket(
    tmp_path: Path,
) -> None:
    pools = build_pools(discover(str(_machine_root(tmp_path, "epyc-ccx"))))
    assert [(p.name, str(p.cpus), p.parent) for p in pools] == [
        ("socket #0", "0-63", None),
        ("socket #0/L3 cache #0", "0-15", 0),
        ("socket #0/L3 cache #1", "16-31", 0),
        ("socket #0/L3 cache #2", "32-47", 0),
        ("socket #0/L3 cache #3", "48-63", 0),
    ]


@pytest.mark.parametrize(
    ("caches", "l3_pools"),
    [
        ((), 0),  # no cache information: no L3 level
        (("0-3", "4-7"), 0),  # one L3 per NUMA node: the node itself, no extra level
        (("0-1", "2-3", "4-5", "6-7"), 4),  # two per node: two L3 pools under each node
        (("0-2", "3-5", "6-7"), 0),  # 3-5 straddles both nodes; each holds only one whole
    ],
)
def test_l3_pools_only_where_a_pool_wholly_holds_more_than_one_cache(
    tmp_path: Path, caches: tuple[str, ...], l3_pools: int
) -> None:
    write_sysfs(tmp_path, Layout(packages=1, nodes_per_die=2, cores_per_node=4, threads=1))
    write_caches(tmp_path, [CacheSpec(3, caches)] if caches else [])
    pools = build_pools(discover(str(tmp_path)))
    assert len([p for p in pools if p.level == "l3cache"]) == l3_pools


def test_dies_that_are_single_clusters_are_omitted_when_sysfs_names_clusters(
    tmp_path: Path,
) -> None:
    layout = Layout(packages=1, dies=2, nodes_per_die=1, cores_per_node=4, threads=1)
    write_sysfs(tmp_path, layout)
    pools = build_pools(discover(str(tmp_path)))
    assert [p.level for p in pools] == ["package", "die", "die"]  # no cluster ids: kept
    for cpu in range(8):
        (tmp_path / f"sys/devices/system/cpu/cpu{cpu}/topology/cluster_id").write_text(
            f"{cpu // 4}\n"
        )
    # Dies omitted: the socket's NUMA nodes are its children instead.
    assert [p.level for p in build_pools(discover(str(tmp_path)))] == ["package", "numa", "numa"]


def _n4c128_policy(tmp_path: Path, **spec: object) -> Runtime:
    root = _machine_root(tmp_path, "n4c128-l3")
    policy = TopologyAwarePolicy()
    policy.setup(topology_spec(**spec), PolicyEnv(host_root=str(root)))
    return Runtime(policy)


def test_exclusive_cpus_come_from_one_l3_pool_and_shrink_its_shared_set(tmp_path: Path) -> None:
    # As in test19's last scenario: a 4-CPU Guaranteed container is given whole cores of a
    # single L3 pool (the deepest level), and the shared CPUs of that pool shrink by them.
    rt = _n4c128_policy(tmp_path)
    g = rt.create(guaranteed("pod61", 4000))
    exclusive = CpuSet.parse(rt.cpus[g.id] or "")
    engine = rt.policy.engine  # type: ignore[attr-defined]
    home = next(p for p in engine.pools if exclusive.issubset(p.cpus) and p.level == "l3cache")
    assert len(exclusive) == 4
    assert all(engine.system.cpus[c].threads.issubset(exclusive) for c in exclusive)
    assert engine.supply.shared_cpus(home.index) == (home.cpus - exclusive - engine.reserved)


def _sets(rt: Runtime, containers: list[Container]) -> list[CpuSet]:
    return [CpuSet.parse(rt.cpus[c.id] or "") for c in containers]


def _disjoint(sets: list[CpuSet]) -> bool:
    return len(CpuSet.union_all(sets)) == sum(len(s) for s in sets)


# Replays of n4c128/test19-cacheclusters (nri-plugins test/e2e) sections in which every
# burstable container carries `unlimited-burstable...: l3cache`; that annotation is issue
# 14 item 10 (not in this branch), so the same level is set for all by the configuration
# (`unlimitedBurstable: l3cache`), which is what the annotation selects per container.
# Not replayed here: pod0 (system/socket levels mixed in one pod), pod1-pod3 and pod27-44
# (promotion to NUMA when the request or limit exceeds an L3: item 9/10 scoring), pod4 (two
# containers of one pod) and pod5 (affinity, item 3).


def test_test19_l3_cache_exhaustion_places_each_container_in_its_own_l3(tmp_path: Path) -> None:
    rt = _n4c128_policy(tmp_path, unlimited_burstable="l3cache")
    sets = _sets(rt, [rt.create(burstable(f"pod{i}", 2000)) for i in range(6, 10)])
    assert [len(s) for s in sets] == [8, 8, 8, 8]
    assert _disjoint(sets)


def test_test19_least_occupied_l3_is_shared(tmp_path: Path) -> None:
    rt = _n4c128_policy(tmp_path, unlimited_burstable="l3cache")
    busy = [rt.create(burstable(f"pod{i}", 4000)) for i in range(10, 25)]
    light = rt.create(burstable("pod25", 1000))
    sets = _sets(rt, [*busy, light])
    assert len(CpuSet.union_all(sets)) == 127 and _disjoint(sets)
    pod26 = rt.create(burstable("pod26", 2000))
    assert rt.cpus[pod26.id] == rt.cpus[light.id]


def test_test19_guaranteed_pods_slice_exclusive_cpus_off_l3_pools(tmp_path: Path) -> None:
    rt = _n4c128_policy(tmp_path, unlimited_burstable="l3cache")
    pods = {i: rt.create(burstable(f"pod{i}", 2000)) for i in range(45, 61)}
    sets = _sets(rt, list(pods.values()))
    assert len(CpuSet.union_all(sets)) == 127 and _disjoint(sets)
    assert len(_sets(rt, [pods[45]])[0]) == 8
    pod61 = rt.create(guaranteed("pod61", 4000))
    [g61, b45] = _sets(rt, [pod61, pods[45]])
    assert (len(g61), len(b45)) == (4, 4) and g61.isdisjoint(b45)
    pod62 = rt.create(guaranteed("pod62", 8000))
    [g62, b50, b51] = _sets(rt, [pod62, pods[50], pods[51]])
    assert (len(g62), len(b50), len(b51)) == (8, 2, 6)
    rt.remove(pod61)
    rt.remove(pod62)
    assert [len(s) for s in _sets(rt, [pods[45], pods[50], pods[51]])] == [8, 8, 8]


def _write_qemu_amd_caches(root: Path) -> None:
    """The caches a Linux 6.1 guest shows under qemu's ``-cpu max`` with its default AMD
    vendor and no ``topoext`` (captured in the n4c16 guest): no SMT, every CPU's L1, L2 and
    L3 of its own id, the L3 listing the CPU's whole NUMA node."""
    cpu_dir = root / "sys/devices/system/cpu"
    for cpu in range(16):
        node = CpuSet(range(cpu // 4 * 4, cpu // 4 * 4 + 4))
        levels = [(1, "Data", CpuSet([cpu])), (1, "Instruction", CpuSet([cpu])),
                  (2, "Unified", CpuSet([cpu])), (3, "Unified", node)]  # fmt: skip
        for index, (level, kind, shared) in enumerate(levels):
            d = cpu_dir / f"cpu{cpu}/cache/index{index}"
            d.mkdir(parents=True)
            for name, value in (("level", level), ("type", kind), ("id", cpu),
                                ("size", "512K"), ("shared_cpu_list", shared)):  # fmt: skip
                (d / name).write_text(f"{value}\n")


def test_qemu_amd_caches_of_one_numa_node_each_make_no_pool_of_their_own(tmp_path: Path) -> None:
    # Four L3 "caches" per NUMA node, all with the node's CPUs: a child pool identical to
    # its parent (or to a sibling) would split nothing; none is built.
    write_sysfs(tmp_path, Layout(packages=2, nodes_per_die=2, cores_per_node=4, threads=1))
    _write_qemu_amd_caches(tmp_path)
    pools = build_pools(discover(str(tmp_path)))
    assert [(p.name, str(p.cpus)) for p in pools] == [
        ("root", "0-15"),
        ("socket #0", "0-7"),
        ("NUMA node #0", "0-3"),
        ("NUMA node #1", "4-7"),
        ("socket #1", "8-15"),
        ("NUMA node #2", "8-11"),
        ("NUMA node #3", "12-15"),
    ]
    for p in pools:
        children = [pools[c].cpus for c in p.children]
        assert p.cpus not in children and len(set(map(str, children))) == len(children), p.name


def test_identical_l3_caches_under_a_socket_count_once(tmp_path: Path) -> None:
    # One NUMA node per socket, two "caches" per CPU pair but listing the same four CPUs:
    # two distinct L3 caches remain, so the socket gets two L3 pools, not four.
    write_sysfs(tmp_path, Layout(packages=1, nodes_per_die=1, cores_per_node=8, threads=1))
    cpu_dir = tmp_path / "sys/devices/system/cpu"
    for cpu in range(8):
        d = cpu_dir / f"cpu{cpu}/cache/index3"
        d.mkdir(parents=True)
        shared = "0-3" if cpu < 4 else "4-7"
        for name, value in (("level", 3), ("type", "Unified"), ("id", cpu // 2),
                            ("size", "8M"), ("shared_cpu_list", shared)):  # fmt: skip
            (d / name).write_text(f"{value}\n")
    pools = build_pools(discover(str(tmp_path)))
    l3 = [(p.name, str(p.cpus)) for p in pools if p.level == "l3cache"]
    assert l3 == [("socket #0/L3 cache #0", "0-3"), ("socket #0/L3 cache #2", "4-7")]
