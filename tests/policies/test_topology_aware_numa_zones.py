"""topology-aware's NUMA zones for NodeResourceTopology (``numazones``): what a NUMA-aware
scheduler reads, checked against where the policy then places containers."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from nri_resmgr.cpus.errors import PlacementError
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.instrumentation.exports import TopologyZone
from nri_resmgr.observability.nrt import nrt_body
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from nri_resmgr.policies.topology_aware.numazones import NUMA_ZONE_TYPE
from nri_resmgr.resmgr.model import Container, Pod
from nri_resmgr.sim.synthetic import GIB
from tests.policies.workload import (
    besteffort,
    burstable,
    guaranteed,
    resources,
    start,
    topology_spec,
)
from tests.sysfs.fakesys import N4C16, N4C16_ISOLATED, N6_HBM_CXL, ONE_SOCKET_4CPU, Layout


def policy(tmp: Path, layout: Layout = N4C16, **kw: str) -> TopologyAwarePolicy:
    p = TopologyAwarePolicy()
    start(p, tmp, layout, topology_spec(**({"reserved": "cpuset:0"} | kw)))
    return p


def numa(p: TopologyAwarePolicy) -> dict[str, TopologyZone]:
    return {z.name: z for z in p.topology_zones() if z.type == NUMA_ZONE_TYPE}


def cpu(z: TopologyZone) -> tuple[str, str, str]:
    r = next(r for r in z.resources if r.name == "cpu")
    return r.capacity, r.allocatable, r.available


def available(p: TopologyAwarePolicy) -> dict[int, int]:
    """Per NUMA node id: the whole CPUs its zone says a new Guaranteed container can get."""
    return {int(n.removeprefix("node-")): int(cpu(z)[2]) for n, z in numa(p).items()}


def test_every_numa_node_is_a_zone_the_scheduler_plugin_reads(tmp_path: Path) -> None:
    p = policy(tmp_path)
    zones = numa(p)
    assert list(zones) == ["node-0", "node-1", "node-2", "node-3"]
    # CPU 0 is reserved: node 0 offers 3 of its 4 CPUs.
    assert [cpu(z) for z in zones.values()] == [("4", "3", "3")] + [("4", "4", "4")] * 3
    memory = next(r for r in zones["node-2"].resources if r.name == "memory")
    assert (memory.capacity, memory.allocatable, memory.available) == (str(2 * GIB),) * 3
    assert zones["node-2"].costs == (("node-0", 21), ("node-1", 21), ("node-2", 10),
                                     ("node-3", 12))  # fmt: skip
    assert dict(zones["node-2"].attributes) == {"cpuset": "8-11", "pool": "NUMA node #2"}
    body = nrt_body(p.name, p.topology_zones(), (), p.topology_attributes())
    assert body["attributes"] == [
        {"name": "TopologyPolicy", "value": "topology-aware"},
        {"name": "topologyManagerPolicy", "value": "single-numa-node"},
        {"name": "topologyManagerScope", "value": "container"},
    ]
    # The pool zones come first, as before (upstream's readers index them by name).
    assert [z["name"] for z in body["zones"]][:2] == ["root", "socket #0"]
    assert body["zones"][-1]["costs"][3] == {"name": "node-3", "value": 10}


def test_one_numa_node_is_one_zone_through_the_root_pool(tmp_path: Path) -> None:
    p = policy(tmp_path, ONE_SOCKET_4CPU, reserved="cpuset:3")
    # The root pool keeps one shared CPU whatever its load: 2 of the 3 can go exclusive.
    assert {n: cpu(z) for n, z in numa(p).items()} == {"node-0": ("4", "3", "2")}
    assert dict(numa(p)["node-0"].attributes)["pool"] == p.engine.pools[0].name


def test_a_socket_that_is_one_numa_node_is_its_zone_and_cpu_less_nodes_get_none(
    tmp_path: Path,
) -> None:
    # n6-hbm-cxl: two sockets of one CPU node each, and four CPU-less memory nodes.
    p = policy(tmp_path, N6_HBM_CXL)
    zones = numa(p)
    assert list(zones) == ["node-0", "node-1"]
    assert dict(zones["node-1"].attributes)["pool"] == "socket #1"
    memory = next(r for r in zones["node-1"].resources if r.name == "memory")
    assert memory.capacity == str(p.engine.system.nodes[1].memory)  # its own, not the HBM's
    # The plugin reads a cost to every node it knows: the CPU-less ones are named too.
    assert [name for name, _ in zones["node-0"].costs] == [f"node-{n}" for n in range(6)]


def test_available_follows_grants_and_releases(tmp_path: Path) -> None:
    p = policy(tmp_path)
    before = available(p)
    for n in (1, 2, 3):
        pod, ctr = guaranteed(f"g{n}", 1000 * n)
        p.create_container(pod, ctr)
        node = _node_of(p, ctr)
        after = available(p)
        assert after[node] == before[node] - n
        assert {k: v for k, v in after.items() if k != node} == {
            k: v for k, v in before.items() if k != node
        }
        p.remove_container(pod, ctr)
        assert available(p) == before


def test_shared_containers_keep_their_cpus_out_of_available(tmp_path: Path) -> None:
    p = policy(tmp_path)
    pod, ctr = burstable("b", 1500, 2000)
    p.create_container(pod, ctr)
    a = p.engine.allocation(ctr.id)
    assert a is not None and a.pool.startswith("NUMA node #")
    node = int(a.pool.removeprefix("NUMA node #"))
    # 1.5 CPUs of shared load: two of the node's CPUs stay shared.
    assert available(p)[node] == len(p.engine.system.nodes[node].cpus - CpuSet([0])) - 2


def test_memory_available_is_what_is_left_on_the_node(tmp_path: Path) -> None:
    p = policy(tmp_path)
    pod, _ = guaranteed("m", 1000)
    ctr = Container(id="m-c0", pod_id=pod.id, name="c0", resources=resources(1000, 1000, GIB))
    p.create_container(pod, ctr)
    zone = numa(p)[f"node-{_node_of(p, ctr)}"]
    assert next(r.available for r in zone.resources if r.name == "memory") == str(GIB)


def test_isolated_cpus_count_for_one_cpu_containers(tmp_path: Path) -> None:
    # CPUs 14-15 are isolated: a 1-CPU Guaranteed container prefers them (the default), a
    # larger one does not take them unannotated, so node 3 offers what its shared CPUs give.
    p = policy(tmp_path, N4C16_ISOLATED)
    assert cpu(numa(p)["node-3"]) == ("4", "4", "2")
    for n in (1, 2):
        pod, ctr = guaranteed(f"iso{n}", 1000)
        p.create_container(pod, ctr)
    assert cpu(numa(p)["node-3"])[2] == "2"


def _node_of(p: TopologyAwarePolicy, ctr: Container) -> int:
    a = p.engine.allocation(ctr.id)
    assert a is not None and a.cpus is not None
    nodes = p.engine.system.nodes_of(a.cpus)
    assert len(nodes) == 1, f"{ctr.id} spans NUMA nodes {nodes}"
    return nodes[0]


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("guaranteed"), st.integers(1, 4)),
        st.tuples(st.just("burstable"), st.integers(1, 3000)),
        st.tuples(st.just("besteffort"), st.just(0)),
        st.tuples(st.just("remove"), st.integers(0, 100)),
    ),
    max_size=12,
)


@settings(max_examples=40)  # a policy started per example: 0.2 s each here
@given(OPS)
def test_what_the_zones_admit_lands_in_one_numa_node(
    ops: list[tuple[str, int]],
) -> None:
    """After any sequence of creates and removes: a Guaranteed container as large as the
    largest NUMA zone's ``available`` is placed inside one NUMA node, with exclusive CPUs.
    (``available`` is what the NUMA pool itself can give: a lower bound. The root pool's
    looser rule may carve a whole NUMA node's CPUs for a larger container; the scheduler is
    then stricter than the node, never looser.)"""
    with tempfile.TemporaryDirectory() as tmp:
        p = policy(Path(tmp))
        live: list[tuple[Pod, Container]] = []
        for n, (kind, arg) in enumerate(ops):
            if kind == "remove":
                if live:
                    p.remove_container(*live.pop(arg % len(live)))
                continue
            made = _made(kind, arg, f"c{n}")
            try:
                p.create_container(*made)
            except PlacementError:  # one that does not fit is not placed: the next op
                continue
            live.append(made)
        _check_largest(p)


def _made(kind: str, arg: int, name: str) -> tuple[Pod, Container]:
    if kind == "guaranteed":
        return guaranteed(name, 1000 * arg)
    if kind == "burstable":
        return burstable(name, arg, 2 * arg)
    return besteffort(name)


def _check_largest(p: TopologyAwarePolicy) -> None:
    most = max(available(p).values())
    if most:
        pod, ctr = guaranteed("probe", 1000 * most)
        p.create_container(pod, ctr)
        a = p.engine.allocation(ctr.id)
        assert a is not None and len(a.exclusive) == most
        _node_of(p, ctr)
        p.remove_container(pod, ctr)
