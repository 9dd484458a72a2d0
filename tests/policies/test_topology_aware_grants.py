"""Topology-aware grants seen from outside: the CPU weight each kind of grant sets, and what
happens when no pool can take a container (over-commit, refusal, a bad annotation).

Through the policy's public calls only (create_container and the runtime view), so the tests
hold whatever module the engine's parts live in. Each expectation names its rule: the
nri-plugins source (cmd/plugins/topology-aware/policy/) or this project's docs (docs/policies.md).
"""

from __future__ import annotations

import logging
from pathlib import Path

import attrs
import pytest

from nri_resmgr.cpus.errors import PlacementError
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.resmgr.model import Container, Pod
from tests.policies.test_topology_aware import (
    EXCL,
    MIXED,
    SHARED,
    assert_exclusive_is_exclusive,
    exclusive_of,
    policy,
)
from tests.policies.workload import Runtime, besteffort, burstable, guaranteed
from tests.sysfs.fakesys import N4C16_ISOLATED, ONE_SOCKET_4CPU, Layout

P = "resource-policy.nri.io"
# One socket of two NUMA nodes, one core of two threads each: socket 0-3, nodes 0-1 and 2-3.
TWO_NODES = Layout(packages=1, nodes_per_die=2, cores_per_node=1, threads=2)


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Each logged line whole: a check on the exact words, not on a substring of them."""
    return [r.getMessage() for r in caplog.records]


def shares(milli: int) -> int:
    """cgroup v1 cpu.shares for a mCPU figure: 1024 per CPU, at least 2 (kubelet's rule)."""
    return max(2, milli * 1024 // 1000)


@pytest.mark.parametrize(
    ("pc", "kind", "weight"),
    [
        # pools.go applyGrant: the weight of the shared portion, or, with none, of the
        # exclusive CPUs (1000 mCPU each).
        (guaranteed("e", 2000), EXCL, shares(2000)),
        (guaranteed("m", 1500), MIXED, shares(500)),  # one exclusive CPU + 500m shared
        (guaranteed("m3", 3000), EXCL, shares(3000)),
        (burstable("s", 700, 700), SHARED, shares(700)),
        (besteffort("b"), SHARED, shares(0)),
    ],
)
def test_cpu_shares_are_the_weight_of_the_grants_cpu_portion(
    tmp_path: Path, pc: tuple[Pod, Container], kind: str, weight: int
) -> None:
    p = policy(tmp_path)
    adjustment, _ = p.create_container(*pc)
    assert exclusive_of(p, pc[1].id)[0] == kind
    assert adjustment.cpu_shares == weight


def test_a_preserved_container_gets_no_cpu_settings_at_all(tmp_path: Path) -> None:
    p = policy(tmp_path)
    pod, ctr = guaranteed("g", 1000, annotations={f"cpu.preserve.{P}": "true"})
    adjustment, _ = p.create_container(pod, ctr)
    assert (adjustment.cpuset_cpus, adjustment.cpuset_mems, adjustment.cpu_shares) == (
        None,
        None,
        None,
    )


def test_full_shared_pools_are_over_committed_in_the_roomiest_pool(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # CPU 0 reserved: socket 1-3, node #0 {1}, node #1 {2,3}. 3000m cannot be exclusive
    # (the socket would keep no shared CPU) and loads the socket's three CPUs fully. A 500m
    # container then fits nowhere (the nodes carry their share of that load: 1000m on one
    # CPU, 2000m on two); it is over-committed rather than refused (README: "falling back
    # to shared CPUs, and then to over-committing the roomiest pool"), in the pool with the
    # most shared CPUs: the socket.
    p = policy(tmp_path, TWO_NODES, reserved="cpuset:0")
    rt = Runtime(p)
    g = rt.create(guaranteed("g", 3000))
    assert exclusive_of(p, g.id) == (SHARED, "")
    with caplog.at_level(logging.WARNING):
        bu = rt.create(burstable("bu", 500, 500))
    assert "default/bu/c0: shared CPUs over-committed; placing in socket #0" in messages(caplog)
    assert rt.placement(bu) == rt.placement(g) == ("1-3", "0-1")
    assert exclusive_of(p, bu.id) == (SHARED, "")


@pytest.mark.parametrize(
    ("layout", "reserved", "available"),
    [
        (ONE_SOCKET_4CPU, "cpuset:0-1", "cpuset:0-1"),  # every allowed CPU reserved
        (N4C16_ISOLATED, "cpuset:0", "cpuset:0,14-15"),  # the rest isolated
    ],
)
def test_no_sharable_cpu_fails_the_creation_naming_the_container(
    tmp_path: Path, layout: Layout, reserved: str, available: str
) -> None:
    p = policy(tmp_path, layout, reserved=reserved, available=available)
    with pytest.raises(PlacementError) as caught:
        p.create_container(*burstable("bu", 250, 250))
    assert str(caught.value) == (
        "default/bu/c0: no shared CPU to run on (250 mCPU requested; every allowed CPU is "
        "reserved, isolated or exclusive)"
    )


def test_an_isolated_cpu_is_still_granted_when_nothing_is_sharable(tmp_path: Path) -> None:
    # The control of the case above: the machine is not unusable, only its shared part is.
    p = policy(tmp_path, N4C16_ISOLATED, reserved="cpuset:0", available="cpuset:0,14-15")
    rt = Runtime(p)
    g = rt.create(guaranteed("g", 1000))
    assert exclusive_of(p, g.id) == (EXCL, rt.cpus[g.id])
    assert rt.cpus[g.id] in ("14", "15")


def test_an_invalid_unlimited_burstable_level_is_logged_and_the_configured_one_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # docs/policies.md: "unlimited-burstable ... another value is logged, the config's level used".
    p = policy(tmp_path)
    rt = Runtime(p)
    pod, ctr = burstable("bu", 200, None)
    pod = attrs.evolve(pod, annotations={f"unlimited-burstable.{P}": "rack"})
    with caplog.at_level(logging.ERROR):
        bu = rt.create((pod, ctr))
    assert (
        "ignoring invalid unlimited-burstable annotation 'rack' "
        "(not one of system, package, die, numa, l3cache)"
    ) in messages(caplog)
    plain = Runtime(policy(tmp_path / "plain"))
    assert rt.placement(bu) == plain.placement(plain.create(burstable("bu", 200, None)))


@pytest.mark.parametrize(("level", "cpus"), [("system", "1-15"), ("numa", "4-7")])
def test_a_valid_unlimited_burstable_level_is_applied(
    tmp_path: Path, level: str, cpus: str
) -> None:
    # The level picks the pool depth for an unlimited Burstable: the root (all but the
    # reserved CPU 0), or the roomiest NUMA node (#1: #0 lost CPU 0, the lower id wins).
    p = policy(tmp_path)
    rt = Runtime(p)
    pod, ctr = burstable("bu", 200, None)
    pod = attrs.evolve(pod, annotations={f"unlimited-burstable.{P}": level})
    assert rt.cpus[rt.create((pod, ctr)).id] == cpus


def test_a_wide_exclusive_grant_leaves_a_busy_node_a_cpu_past_a_fully_sliced_one(
    tmp_path: Path,
) -> None:
    # nri-plugins SliceableCPUs: exclusive CPUs taken from a wide pool leave each busy
    # descendant what its containers need. NUMA node #1 is sliced whole first (an idle pool
    # may be), so it has no shared CPU left; the BestEffort in node #2 still counts, and the
    # 8 CPUs, which only the root can give, leave it one CPU.
    p = policy(tmp_path)
    rt = Runtime(p)
    whole = rt.create(guaranteed("whole", 4000))
    assert exclusive_of(p, whole.id) == (EXCL, "4-7")
    be = rt.create(besteffort("be"))
    assert rt.cpus[be.id] == "8-11"  # the roomiest node left, the lower id of #2 and #3
    wide = rt.create(guaranteed("wide", 8000))
    kind, own = exclusive_of(p, wide.id)
    assert kind == EXCL and len(CpuSet.parse(own)) == 8
    left = CpuSet.parse(rt.cpus[be.id] or "")
    assert left and left.issubset(CpuSet.parse("8-11")) and left.isdisjoint(CpuSet.parse(own))
    assert_exclusive_is_exclusive(p, rt)


def test_an_exclusive_request_prefers_shared_capacity_over_fewer_neighbours(
    tmp_path: Path,
) -> None:
    # pools.go compareScores, as scoring.py lists it: rule 10 (an exclusive request: more
    # shared capacity left wins, then the lower id) comes before rule 11 (fewer colocated
    # containers), which only shared requests use. BestEfforts by rule 11: #1, #2, #3, #0
    # (the only node still empty), then #1 again (#1-#3 have a CPU more than #0).
    p = policy(tmp_path)
    rt = Runtime(p)
    nodes = [p.engine.allocation(rt.create(besteffort(f"be{i}")).id).pool for i in range(5)]  # type: ignore[union-attr]
    assert nodes == [f"NUMA node #{n}" for n in (1, 2, 3, 0, 1)]
    # Node #1 now has two neighbours, #2 and #3 one: a shared request would avoid #1, an
    # exclusive CPU goes there (three shared CPUs left, as in #2 and #3; the lower id).
    g = rt.create(guaranteed("g", 1000))
    assert p.engine.allocation(g.id).pool == "NUMA node #1"  # type: ignore[union-attr]
    s = rt.create(burstable("s", 100, 100))
    assert p.engine.allocation(s.id).pool != "NUMA node #1"  # type: ignore[union-attr]


@pytest.mark.parametrize(("shared_load", "kind"), [(1000, EXCL), (1001, SHARED)])
def test_exclusive_cpus_only_while_the_cpus_left_carry_the_shared_load(
    tmp_path: Path, shared_load: int, kind: str
) -> None:
    # CPU 0 reserved, one pool of 1-3. Two exclusive CPUs leave one shared CPU: 1000 mCPU
    # of shared load fit on it, 1001 do not (pickExclusiveCPUs: the pool's allocatable
    # shared capacity must cover what its containers use), so the request is shared then.
    p = policy(tmp_path, ONE_SOCKET_4CPU, reserved="cpuset:0")
    rt = Runtime(p)
    rt.create(burstable("load", shared_load, shared_load))
    g = rt.create(guaranteed("g", 2000))
    assert exclusive_of(p, g.id)[0] == kind
    assert_exclusive_is_exclusive(p, rt)
