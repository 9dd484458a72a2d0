"""Balloons rebuilt from running containers respect every type limit (issue 34 item 12).

A restart (Synchronize) finds containers on cpusets the previous run gave them, or another
configuration gave them; restore turns each cpuset into a balloon of the containers' type.
These run restore at and over each limit of the type (``maxBalloons``, ``minBalloons``,
``maxCPUs``): the restored state must never hold more balloons, fewer balloons or bigger
balloons than the type allows, and every container must still be placed. The planted-bug
audit found a restore one balloon over ``maxBalloons`` passing the suite, whose restore
tests all stayed within the limits.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_resmgr.config.models import BalloonType
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.balloons import BalloonsPolicy
from nri_resmgr.resmgr.model import Container, Pod
from nri_resmgr.resmgr.policy import PolicyEnv
from tests.policies.workload import balloons_spec, guaranteed, running, start
from tests.sysfs.fakesys import N4C16

NS = "limited"


def restart(
    tmp_path: Path, t: BalloonType, cpusets: list[str], milli: int = 1000
) -> tuple[BalloonsPolicy, list[Container]]:
    """A fresh policy with type ``t`` synchronizing one Guaranteed container of ``milli``
    per cpuset in ``cpusets``, each as the runtime reports it (pinned there)."""
    policy = BalloonsPolicy()
    start(policy, tmp_path, N4C16, balloons_spec(balloon_types=(t,)))
    pods: list[Pod] = []
    containers: list[Container] = []
    for i, cpus in enumerate(cpusets):
        pod, c = guaranteed(f"p{i}", milli, namespace=NS)
        pods.append(pod)
        containers.append(running(c, cpus, "0"))
    fresh = BalloonsPolicy()
    fresh.setup(policy.state.spec, PolicyEnv(host_root=str(tmp_path)))
    fresh.synchronize(pods, containers)
    return fresh, containers


def of_type(policy: BalloonsPolicy, name: str) -> list[CpuSet]:
    return [b.cpus for b in policy.state.balloons if b.type.name == name]


def assert_all_placed(policy: BalloonsPolicy, containers: list[Container]) -> None:
    for c in containers:
        a = policy.state.members.get(c.id)
        assert a is not None, f"{c.id} lost in the restore"
        balloon = policy.state.by_name(a.pool)
        assert balloon is not None and balloon.cpus, a.pool


# -- maxBalloons -----------------------------------------------------------------------------


@pytest.mark.parametrize("clusters", [1, 2, 3, 4])
def test_restore_never_rebuilds_more_balloons_than_max_balloons(
    tmp_path: Path, clusters: int
) -> None:
    t = BalloonType(name="capped", namespaces=(NS,), max_balloons=2)
    cpusets = ["4", "8", "12", "14"][:clusters]
    policy, containers = restart(tmp_path, t, cpusets)
    restored = of_type(policy, "capped")
    assert len(restored) == min(clusters, 2), restored
    assert_all_placed(policy, containers)
    # Those within the limit keep their CPUs (the first ones, in CPU order; a balloon may
    # have grown to take in a container placed afresh).
    for cpus in cpusets[:2]:
        assert any(CpuSet.parse(cpus).issubset(b) for b in restored), (cpus, restored)


def test_restore_at_max_balloons_keeps_every_placement(tmp_path: Path) -> None:
    t = BalloonType(name="capped", namespaces=(NS,), max_balloons=3)
    policy, containers = restart(tmp_path, t, ["4", "8", "12"])
    assert sorted(str(c) for c in of_type(policy, "capped")) == ["12", "4", "8"]
    assert_all_placed(policy, containers)


# -- minBalloons -----------------------------------------------------------------------------


@pytest.mark.parametrize(("clusters", "expected"), [(0, 2), (1, 2), (2, 2), (3, 3)])
def test_restore_tops_up_to_min_balloons_and_keeps_the_rest(
    tmp_path: Path, clusters: int, expected: int
) -> None:
    t = BalloonType(name="floor", namespaces=(NS,), min_balloons=2, min_cpus=1)
    cpusets = ["4", "8", "12"][:clusters]
    policy, containers = restart(tmp_path, t, cpusets)
    restored = of_type(policy, "floor")
    assert len(restored) == expected, restored
    for cpus in cpusets:  # each running container's cpuset is still a balloon of its own
        assert CpuSet.parse(cpus) in restored
    assert_all_placed(policy, containers)


def test_min_balloons_over_max_balloons_is_never_restored_over_max(tmp_path: Path) -> None:
    t = BalloonType(name="exact", namespaces=(NS,), min_balloons=2, max_balloons=2)
    policy, containers = restart(tmp_path, t, ["4", "8", "12"])
    assert len(of_type(policy, "exact")) == 2
    assert_all_placed(policy, containers)


# -- maxCPUs -------------------------------------------------------------------------------


@pytest.mark.parametrize(("cpuset", "members"), [("4-5", 2), ("4-6", 3), ("4-7", 1)])
def test_a_restored_balloon_never_holds_more_than_max_cpus(
    tmp_path: Path, cpuset: str, members: int
) -> None:
    """At the limit (two CPUs for two 1-CPU containers) the balloon is kept as it was; over
    it (a cpuset of three or four CPUs, from another configuration) it holds at most
    maxCPUs."""
    t = BalloonType(name="narrow", namespaces=(NS,), max_cpus=2)
    policy, containers = restart(tmp_path, t, [cpuset] * members)
    restored = of_type(policy, "narrow")
    assert restored and all(len(cpus) <= 2 for cpus in restored), restored
    assert_all_placed(policy, containers)
    if cpuset == "4-5":
        assert restored == [CpuSet.parse("4-5")]


def test_containers_a_type_can_never_hold_are_restored_in_the_default_balloon(
    tmp_path: Path,
) -> None:
    t = BalloonType(name="narrow", namespaces=(NS,), max_cpus=1)
    policy, containers = restart(tmp_path, t, ["4-5"], milli=2000)  # needs 2 > maxCPUs 1
    assert of_type(policy, "narrow") == []
    a = policy.state.members.get(containers[0].id)
    assert a is not None and a.pool.startswith("default")


def test_a_container_needing_exactly_max_cpus_is_restored_in_its_type(tmp_path: Path) -> None:
    t = BalloonType(name="narrow", namespaces=(NS,), max_cpus=2)
    policy, containers = restart(tmp_path, t, ["4-5"], milli=2000)  # needs 2 == maxCPUs
    assert of_type(policy, "narrow") == [CpuSet.parse("4-5")]
    a = policy.state.members.get(containers[0].id)
    assert a is not None and a.pool.startswith("narrow")
