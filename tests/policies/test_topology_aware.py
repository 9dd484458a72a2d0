from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from nri_resmgr.config.models import Constraints
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.errors import ConfigError, InvalidValue
from nri_resmgr.policies import create_policy
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from tests.policies.workload import (
    Runtime,
    besteffort,
    burstable,
    guaranteed,
    start,
    topology_spec,
)
from tests.sysfs.fakesys import (
    FOUR_NUMA_DIES,
    N4C16,
    N4C16_ISOLATED,
    ONE_SOCKET_4CPU,
    SPARSE,
    Layout,
)

P = "resource-policy.nri.io"


def policy(tmp_path: Path, layout: Layout = N4C16, **spec: Any) -> TopologyAwarePolicy:
    p = TopologyAwarePolicy()
    start(p, tmp_path, layout, topology_spec(**spec))
    return p


@pytest.mark.parametrize(
    ("layout", "pools"),
    [
        (ONE_SOCKET_4CPU, ["socket #0=0-3"]),
        (
            N4C16,
            [
                "root=0-15",
                "socket #0=0-7",
                "NUMA node #0=0-3",
                "NUMA node #1=4-7",
                "socket #1=8-15",
                "NUMA node #2=8-11",
                "NUMA node #3=12-15",
            ],
        ),
        (
            FOUR_NUMA_DIES,
            [
                "socket #0=0-15",
                "die #0/0=0-7",
                "NUMA node #0=0-3",
                "NUMA node #1=4-7",
                "die #0/1=8-15",
                "NUMA node #2=8-11",
                "NUMA node #3=12-15",
            ],
        ),
        (SPARSE, ["socket #0=0-1,4-5,64-67", "NUMA node #0=0-1,4-5", "NUMA node #1=64-67"]),
        (
            Layout(packages=1, nodes_per_die=2, cores_per_node=2, memoryless_nodes=(1,)),
            ["socket #0=0-3"],
        ),
    ],
)
def test_pool_tree(tmp_path: Path, layout: Layout, pools: list[str]) -> None:
    p = policy(tmp_path, layout)
    assert [f"{x.name}={x.cpus}" for x in p.engine.pools] == pools


def test_registered() -> None:
    assert isinstance(create_policy("topology-aware"), TopologyAwarePolicy)


def exclusive_of(p: TopologyAwarePolicy, c_id: str) -> tuple[str, str]:
    a = p.engine.allocation(c_id)
    assert a is not None
    return a.kind.value, str(a.exclusive)


def assert_exclusive_is_exclusive(p: TopologyAwarePolicy, rt: Runtime) -> None:
    """No container's exclusive CPUs appear in any other container's cpuset."""
    for a in p.engine.allocations():
        assert a.exclusive.issubset(CpuSet.parse(rt.cpus[a.container_id] or ""))
        for other, cpus in rt.cpus.items():
            if other != a.container_id:
                assert a.exclusive.isdisjoint(CpuSet.parse(cpus or "")), (a.name, other)


def test_basic_placement_spreads_over_numa_nodes(tmp_path: Path) -> None:
    # e2e test00 asserts only that four 1-CPU guaranteed containers get disjoint CPUs; the
    # spreading is nri-plugins' pool scoring (the most free capacity wins), so each lands on
    # a NUMA node of its own, with its memory there.
    p = policy(tmp_path)
    rt = Runtime(p)
    made = [rt.create(guaranteed(f"g{i}", 1000)) for i in range(4)]
    cpus = [CpuSet.parse(rt.cpus[c.id] or "") for c in made]
    assert all(len(c) == 1 for c in cpus)
    assert len(CpuSet.union_all(cpus)) == 4
    nodes = [{cpu // 4 for cpu in c} for c in cpus]  # N4C16: 4 CPUs per NUMA node
    assert sorted(n.pop() for n in nodes) == [0, 1, 2, 3]
    assert all(rt.mems[c.id] == str(min(cs) // 4) for c, cs in zip(made, cpus, strict=True))
    assert all(exclusive_of(p, c.id)[0] == "exclusive" for c in made)
    assert_exclusive_is_exclusive(p, rt)


EXCL, MIXED, SHARED = "exclusive", "exclusive+shared", "shared"


@pytest.mark.parametrize(
    ("workload", "expected"),
    [
        # (kind, mCPU, annotations) -> (cpus, mems, allocation kind, exclusive CPUs).
        # N4C16 with CPU 0 reserved: node #0 shares 1-3, nodes #1-#3 four CPUs each. Derived
        # from the rules (nri-plugins' topology-aware): the tightest pool whose allocatable
        # shared capacity covers the exclusive request, the most capacity left wins.
        ([("g", 2000, {})], [("4-5", "1", EXCL, "4-5")]),
        # An idle node may be sliced empty (SliceableCPUs): 4 CPUs take a whole node.
        ([("g", 4000, {})], [("4-7", "1", EXCL, "4-7")]),
        ([("g", 6000, {})], [("8-13", "2-3", EXCL, "8-13")]),
        ([("g", 1500, {})], [("4-7", "1", MIXED, "4")]),  # < 2 CPUs fractional: mixed
        ([("g", 2500, {})], [("4-7", "1", SHARED, "")]),  # >= 2 CPUs fractional: shared
        ([("g", 2500, {f"prefer-shared-cpus.{P}": "false"})], [("4-7", "1", MIXED, "4-5")]),
        ([("g", 1000, {f"prefer-shared-cpus.{P}": "true"})], [("4-7", "1", SHARED, "")]),
        ([("g", 500, {})], [("4-7", "1", SHARED, "")]),
        # A limited Burstable (1500m, limit 6000m) prefers a pool whose free shared CPU covers
        # the limit (compareScores "enough burstable capacity"): no NUMA node, socket #1.
        (
            [("bu", 1500, {}), ("g", 2000, {})],
            [("8-15", "2-3", SHARED, ""), ("4-5", "1", EXCL, "4-5")],
        ),
        ([("be", 0, {}), ("be", 0, {})], [("4-7", "1", SHARED, ""), ("8-11", "2", SHARED, "")]),
    ],
)
def test_placement_table(
    tmp_path: Path,
    workload: list[tuple[str, int, dict[str, str]]],
    expected: list[tuple[str, str, str, str]],
) -> None:
    p = policy(tmp_path)
    rt = Runtime(p)
    made = []
    for i, (kind, milli, ann) in enumerate(workload):
        if kind == "g":
            made.append(rt.create(guaranteed(f"w{i}", milli, annotations=ann)))
        elif kind == "bu":
            made.append(rt.create(burstable(f"w{i}", milli, 4 * milli)))
        else:
            made.append(rt.create(besteffort(f"w{i}")))
    assert [(*rt.placement(c), *exclusive_of(p, c.id)) for c in made] == expected
    assert_exclusive_is_exclusive(p, rt)


def test_mixed_exclusive_part_is_shared_with_nobody(tmp_path: Path) -> None:
    # A mixed container's own CPU leaves the shared set its pool-mates get.
    p = policy(tmp_path)
    rt = Runtime(p)
    be = rt.create(besteffort("be"))
    m = rt.create(guaranteed("m", 2500, annotations={f"prefer-shared-cpus.{P}": "false"}))
    kind, own = exclusive_of(p, m.id)
    assert kind == MIXED and len(CpuSet.parse(own)) == 2
    assert CpuSet.parse(rt.cpus[be.id] or "").isdisjoint(CpuSet.parse(own))
    assert_exclusive_is_exclusive(p, rt)


def test_shared_pool_shrinks_and_grows(tmp_path: Path) -> None:
    # e2e test02: exclusive slices shrink, then regrow, the shared set of a BestEffort.
    rt = Runtime(policy(tmp_path, ONE_SOCKET_4CPU, reserved="cpuset:0"))
    be = rt.create(besteffort("be"))
    assert rt.placement(be) == ("1-3", "0")
    g1 = rt.create(guaranteed("g1", 1000))
    assert rt.cpus[g1.id] == "1"
    assert rt.updated == [be.id] and rt.cpus[be.id] == "2-3"
    # The last shared CPU of a busy pool is never taken: a second 1-CPU request is refused
    # exclusive CPUs and shares instead.
    g2 = rt.create(guaranteed("g2", 2000))
    assert rt.cpus[g2.id] == "2-3" and rt.updated == []
    rt.remove(g1)
    assert sorted(rt.updated) == sorted([be.id, g2.id])
    assert rt.cpus[be.id] == "1-3" and rt.cpus[g2.id] == "1-3"


def test_an_idle_shared_pool_is_not_sliced_empty(tmp_path: Path) -> None:
    # nri-plugins: exclusive only while the shared capacity stays above the request (3 > 3
    # fails), so the 3-CPU container shares the pool's three CPUs.
    p = policy(tmp_path, ONE_SOCKET_4CPU, reserved="cpuset:0")
    rt = Runtime(p)
    g = rt.create(guaranteed("g", 3000))
    assert rt.placement(g) == ("1-3", "0")
    assert exclusive_of(p, g.id) == (SHARED, "")
    # Its 3000 mCPU now load the pool: a 1-CPU request would leave 2 CPUs for 3000 mCPU.
    g1 = rt.create(guaranteed("g1", 1000))
    assert exclusive_of(p, g1.id) == (SHARED, "")
    assert rt.cpus[g1.id] == "1-3"


def test_burstable_unlimited_goes_to_the_socket(tmp_path: Path) -> None:
    rt = Runtime(policy(tmp_path))
    bu = rt.create(burstable("bu", 200, None))
    assert rt.placement(bu) == ("8-15", "2-3")  # the socket with more free CPUs
    root = Runtime(policy(tmp_path / "b", unlimited_burstable="system"))
    assert root.placement(root.create(burstable("bu", 200, None))) == ("1-15", "0-3")


@pytest.mark.parametrize(
    ("reserved", "namespace", "annotations", "expected"),
    [
        ("750m", "kube-system", {}, "0"),
        ("cpuset:0-1", "kube-system", {}, "0-1"),
        ("cpuset:0-1", "monitoring-a", {}, "0-1"),  # reservedPoolNamespaces glob
        # Not reserved: shared CPUs of the roomiest NUMA node, the lowest pool id among equals
        # (compareScores); node #0 lost 0-1 to the reservation, so node #1 (4-7).
        ("cpuset:0-1", "kube-system", {f"prefer-reserved-cpus.{P}/pod": "false"}, "4-7"),
        ("cpuset:0-1", "default", {f"prefer-reserved-cpus.{P}": "true"}, "0-1"),
        (
            "cpuset:0-1",
            "default",
            {
                f"prefer-reserved-cpus.{P}/pod": "true",
                f"prefer-reserved-cpus.{P}/container.c0": "false",
            },
            "4-7",
        ),
    ],
)
def test_reserved(
    tmp_path: Path, reserved: str, namespace: str, annotations: dict[str, str], expected: str
) -> None:
    rt = Runtime(policy(tmp_path, reserved=reserved, reserved_pool_namespaces=("monitoring-*",)))
    c = rt.create(besteffort("sys", namespace=namespace, annotations=annotations))
    assert rt.cpus[c.id] == expected


def test_reserved_cpus_are_not_shared(tmp_path: Path) -> None:
    rt = Runtime(policy(tmp_path, ONE_SOCKET_4CPU, reserved="cpuset:0-1"))
    assert rt.cpus[rt.create(besteffort("be")).id] == "2-3"


@pytest.mark.parametrize(
    ("available", "exclusive", "shared"),
    [
        ("cpuset:4-11", "8", "5-7"),  # reserved 750m is picked inside available: cpu 4
        ("exclude-cpuset:0-7", "12", "9-11"),  # reserved: cpu 8
    ],
)
def test_available_resources(tmp_path: Path, available: str, exclusive: str, shared: str) -> None:
    rt = Runtime(policy(tmp_path, available=available))
    g = rt.create(guaranteed("g", 1000))
    be = rt.create(besteffort("be"))
    assert rt.cpus[g.id] == exclusive
    assert CpuSet.parse(rt.cpus[be.id] or "").isdisjoint(CpuSet.parse(exclusive))
    assert rt.cpus[be.id] == shared


def test_isolated_cpus_preferred(tmp_path: Path) -> None:
    rt = Runtime(policy(tmp_path, N4C16_ISOLATED))
    # nri-plugins' CPU allocator reserves from the tighter package: socket 1 has 6
    # non-isolated CPUs to socket 0's 8, so the reserved CPU is 8 (not the lowest id, 0).
    assert rt.policy.engine.reserved == CpuSet([8])
    g = rt.create(guaranteed("g", 1000))
    # preferIsolatedCPUs (default true): a 1-CPU request takes an isolated CPU; 14-15 are one
    # core, so the allocator's single-thread rule leaves the lower id, 14 (NUMA node #3).
    assert rt.placement(g) == ("14", "3")
    # Multi-CPU requests use isolated CPUs only when annotated. Otherwise the roomiest node:
    # #0 and #1 have four sharable CPUs (#2 lost 8 to the reservation, #3 its isolated two),
    # the lower pool id wins the tie, and two CPUs are a whole idle core: 0-1.
    g2 = rt.create(guaranteed("g2", 2000))
    assert rt.cpus[g2.id] == "0-1"
    rt.remove(g)
    g3 = rt.create(guaranteed("g3", 2000, annotations={f"prefer-isolated-cpus.{P}": "true"}))
    assert rt.cpus[g3.id] == "14-15"
    # Isolated CPUs are not part of any shared pool.
    be = rt.create(besteffort("be"))
    assert CpuSet.parse(rt.cpus[be.id] or "").isdisjoint(CpuSet.parse("14-15"))


def test_isolation_opt_out(tmp_path: Path) -> None:
    rt = Runtime(policy(tmp_path, N4C16_ISOLATED, prefer_isolated_cpus=False))
    # Reserved is CPU 8 (see above), so NUMA node 0 has the most sliceable CPUs.
    assert rt.cpus[rt.create(guaranteed("g", 1000)).id] == "0"


def pool_cpus(p: TopologyAwarePolicy, name: str) -> CpuSet:
    return next(x.cpus for x in p.engine.pools if x.name == name)


def test_prefer_shared_cpus_config_and_override(tmp_path: Path) -> None:
    p = policy(tmp_path, prefer_shared_cpus=True)
    rt = Runtime(p)
    shared = rt.create(guaranteed("g", 2000))
    # preferSharedCPUs: a whole-CPU request is shared. It lands in the roomiest NUMA node,
    # the lower pool id among equals (node #0 lost CPU 0 to the 750m reservation): node #1,
    # whose CPUs it gets whole.
    assert exclusive_of(p, shared.id) == (SHARED, "")
    assert CpuSet.parse(rt.cpus[shared.id] or "") == pool_cpus(p, "NUMA node #1")
    excl = rt.create(guaranteed("h", 2000, annotations={f"prefer-shared-cpus.{P}": "false"}))
    # The annotation overrides it: two exclusive CPUs, from the roomiest node left (#1 now
    # carries 2000 mCPU of shared load; #2 ties #3 and has the lower id).
    kind, own = exclusive_of(p, excl.id)
    assert kind == EXCL and rt.cpus[excl.id] == own
    assert len(CpuSet.parse(own)) == 2
    assert CpuSet.parse(own).issubset(pool_cpus(p, "NUMA node #2"))
    assert_exclusive_is_exclusive(p, rt)


def test_unknown_annotation_value_is_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rt = Runtime(policy(tmp_path))
    with caplog.at_level(logging.WARNING):
        g = rt.create(guaranteed("g", 1000, annotations={f"prefer-shared-cpus.{P}": "maybe"}))
    # Ignored means placed as without the annotation.
    plain = Runtime(policy(tmp_path / "plain"))
    assert rt.placement(g) == plain.placement(plain.create(guaranteed("g", 1000)))
    assert "prefer-shared-cpus" in caplog.text and "'maybe'" in caplog.text


def test_preserve_leaves_cpuset_alone(tmp_path: Path) -> None:
    p = policy(tmp_path)
    adj, _ = p.create_container(*guaranteed("g", 1000, annotations={f"cpu.preserve.{P}": "true"}))
    assert adj.cpuset_cpus is None and adj.cpuset_mems is None


def test_memory_not_pinned_when_disabled(tmp_path: Path) -> None:
    rt = Runtime(policy(tmp_path, pin_memory=False))
    pinned = Runtime(policy(tmp_path / "pinned"))
    cpus, mems = pinned.placement(pinned.create(guaranteed("g", 1000)))
    assert mems is not None  # the control: with pinMemory the same container gets mems
    assert rt.placement(rt.create(guaranteed("g", 1000))) == (cpus, None)


def test_too_big_request_falls_back_to_shared(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rt = Runtime(policy(tmp_path))
    with caplog.at_level(logging.WARNING):
        g = rt.create(guaranteed("huge", 64000))
    assert rt.cpus[g.id] is not None
    assert "cannot give 64 exclusive CPUs" in caplog.text


def test_update_container_moves_to_new_request(tmp_path: Path) -> None:
    p = policy(tmp_path)
    rt = Runtime(p)
    pod, c = guaranteed("g", 1000)
    rt.create((pod, c))
    assert p.update_container(pod, c, c.resources) == []  # type: ignore[arg-type]
    from tests.policies.workload import resources

    updates = p.update_container(pod, c, resources(2000, 2000))
    assert updates[0].container_id == c.id
    assert updates[0].adjustment.cpuset_cpus == "4-5"  # the old pool (NUMA node #1) is kept


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"reserved": ""}, "spec.reservedResources.cpu: required"),
        ({"reserved": "20"}, "spec.reservedResources.cpu: '20' needs 20 CPUs but only 16"),
        ({"reserved": "cpuset:0-3", "available": "cpuset:4-15"}, "not within the available"),
        ({"available": "4"}, "spec.availableResources.cpu: '4': a CPU quantity"),
        ({"available": "cpuset:99"}, "spec.availableResources.cpu: 'cpuset:99' leaves no"),
    ],
)
def test_config_errors(tmp_path: Path, spec: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        policy(tmp_path, N4C16, **spec)
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cpuset:0-x", "invalid CPU list '0-x' in 'cpuset:0-x'"),
        ("cpuset:0-99999", "invalid cpuset '0-99999': id 99999 is above 65536"),
        ("lots", "expected a CPU quantity, cpuset:<list> or exclude-cpuset:<list>, got 'lots'"),
    ],
)
def test_a_cpu_value_that_does_not_parse_never_reaches_the_policy(text: str, message: str) -> None:
    with pytest.raises(InvalidValue) as err:
        Constraints.of(cpu=text)
    assert str(err.value) == message


def test_isolated_reserved_must_be_single(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="exactly one CPU"):
        policy(tmp_path, N4C16_ISOLATED, reserved="cpuset:13-14")
