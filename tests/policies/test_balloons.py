from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

import pytest

from nri_resmgr.config.models import BalloonType
from nri_resmgr.cpus.errors import PlacementError
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.errors import ConfigError
from nri_resmgr.policies import create_policy
from nri_resmgr.policies.balloons import BalloonsPolicy
from nri_resmgr.policies.balloons.types import BalloonsError
from nri_resmgr.resmgr.model import Container
from nri_resmgr.resmgr.policy import PolicyEnv
from tests.policies.workload import (
    Runtime,
    balloons_spec,
    besteffort,
    burstable,
    container,
    guaranteed,
    start,
)
from tests.sysfs.fakesys import N4C16, ONE_SOCKET_4CPU, TOPOLOGIES, Layout

ANN = "balloon.balloons.resource-policy.nri.io"

FULL = BalloonType(name="full", namespaces=("full-*",), max_cpus=4)
APP = BalloonType(name="app", namespaces=("app",), max_balloons=1, share_idle_cpus_in_same="numa")


def policy(
    tmp_path: Path, *types: BalloonType, layout: Layout = N4C16, **kw: Any
) -> BalloonsPolicy:
    p = BalloonsPolicy()
    start(p, tmp_path, layout, balloons_spec(balloon_types=types, **kw))
    return p


def balloons(p: BalloonsPolicy) -> dict[str, str]:
    return {b.name: str(b.cpus) for b in p.state.balloons}


def test_registered() -> None:
    assert isinstance(create_policy("balloons"), BalloonsPolicy)


def test_builtin_balloons(tmp_path: Path) -> None:
    p = policy(tmp_path, reserved_pool_namespaces=("mon-*",))
    assert balloons(p) == {"reserved[0]": "0", "default[0]": ""}
    rt = Runtime(p)
    assert rt.placement(rt.create(besteffort("k", namespace="kube-system"))) == ("0", "0")
    assert rt.cpus[rt.create(besteffort("m", namespace="mon-x")).id] == "0"
    # A BestEffort container still gets one CPU of its own.
    assert rt.placement(rt.create(besteffort("d"))) == ("1", "0")


@pytest.mark.parametrize(
    ("namespace", "annotations", "balloon"),
    [
        ("full-a", {}, "full[0]"),
        ("app", {}, "app[0]"),
        ("other", {}, "default[0]"),
        ("other", {ANN: "full"}, "full[0]"),
        ("other", {f"{ANN}/pod": "app"}, "app[0]"),
        ("full-a", {f"{ANN}/pod": "app", f"{ANN}/container.c0": "default"}, "default[0]"),
        ("kube-system", {ANN: "full"}, "full[0]"),  # the annotation moves kube-system pods too
        ("kube-system", {}, "reserved[0]"),
    ],
)
def test_type_assignment(
    tmp_path: Path, namespace: str, annotations: dict[str, str], balloon: str
) -> None:
    p = policy(tmp_path, FULL, APP)
    pod, c = guaranteed("g", 1000, namespace=namespace, annotations=annotations)
    p.create_container(pod, c)
    got = p.state.members.get(c.id)
    assert got is not None and got.pool == balloon


def test_unknown_balloon_annotation_fails_the_container(tmp_path: Path) -> None:
    p = policy(tmp_path, FULL)
    pod, c = guaranteed("g", 1000, namespace="full-x", annotations={ANN: "nope"})
    with pytest.raises(BalloonsError, match="no balloon for annotation 'nope'"):
        p.create_container(pod, c)
    assert p.state.members.get(c.id) is None


def test_inflate_and_deflate(tmp_path: Path) -> None:
    # The rule (nri-plugins balloons), not remembered numbers: a balloon holds
    # ceil(sum of its members' requests / 1000) CPUs, grows next to the CPUs it has (the same
    # NUMA node first), and shrinking gives back lone threads before whole cores.
    p = policy(tmp_path, FULL)
    rt = Runtime(p)
    system = p.system

    def cpus(c: Container) -> CpuSet:
        return CpuSet.parse(rt.cpus[c.id] or "")

    pod = guaranteed("p", 500, namespace="full-a")[0]
    c1 = rt.create((pod, container(pod, "c1", 500, 500)))
    one = cpus(c1)
    assert len(one) == 1 and one.isdisjoint(p.state.reserved)
    c2 = rt.create((pod, container(pod, "c2", 700, 700)))
    two = cpus(c2)
    assert len(two) == 2 and one.issubset(two) and cpus(c1) == two and rt.updated == [c1.id]
    c3 = rt.create((pod, container(pod, "c3", 1800, 1800)))
    three = cpus(c3)
    assert len(three) == 3 and two.issubset(three) and len(system.nodes_of(three)) == 1
    rt.remove(c3)
    assert sorted(rt.updated) == sorted([c1.id, c2.id])
    kept = cpus(c1)
    assert kept == cpus(c2) and len(kept) == 2 and kept.issubset(three)
    assert all(system.cpus[c].threads == kept for c in kept)  # one whole core stays
    rt.remove(c2)
    rt.remove(c1)
    assert "full[0]" not in balloons(rt.policy)  # type: ignore[arg-type]


def test_min_and_max_cpus(tmp_path: Path) -> None:
    small = BalloonType(name="small", namespaces=("s",), min_cpus=2, max_cpus=2)
    rt = Runtime(policy(tmp_path, small))
    a = rt.create(burstable("a", 100, 200, namespace="s"))
    got = CpuSet.parse(rt.cpus[a.id] or "")
    # minCPUs (2) although 100 mCPU needs one; a whole core, off the reserved CPU.
    assert len(got) == 2 and rt.policy.system.core_of(min(got)) == got  # type: ignore[attr-defined]
    assert got.isdisjoint(rt.policy.state.reserved)  # type: ignore[attr-defined]
    with pytest.raises(BalloonsError, match="no suitable balloon instance available"):
        rt.create(guaranteed("big", 3000, namespace="s"))  # above maxCPUs


def test_max_balloons_singleton_fills(tmp_path: Path) -> None:
    single = BalloonType(name="one", namespaces=("one",), max_cpus=2, max_balloons=1)
    p = policy(tmp_path, single)
    rt = Runtime(p)
    rt.create(guaranteed("a", 1500, namespace="one"))
    rt.create(guaranteed("b", 500, namespace="one"))
    one = CpuSet.parse(balloons(p)["one[0]"])
    assert len(one) == 2  # 2000 mCPU, at maxCPUs: the singleton is full
    with pytest.raises(BalloonsError, match="no suitable balloon instance available"):
        rt.create(guaranteed("c", 500, namespace="one"))


@pytest.mark.parametrize(
    ("flags", "second"),
    [
        ({}, "t[0]"),  # same pod, same balloon
        ({"prefer_spreading_pods": True, "prefer_new_balloons": True}, "t[1]"),
    ],
)
def test_same_pod_and_spreading(tmp_path: Path, flags: dict[str, bool], second: str) -> None:
    t = BalloonType(name="t", namespaces=("t",), **flags)  # type: ignore[arg-type]
    p = policy(tmp_path, t)
    pod = guaranteed("p", 1000, namespace="t")[0]
    c1, c2 = container(pod, "a", 1000, 1000), container(pod, "b", 1000, 1000)
    p.create_container(pod, c1)
    p.create_container(pod, c2)
    assert p.state.members.get(c2.id).pool == second  # type: ignore[union-attr]


def test_prefer_per_namespace_balloon(tmp_path: Path) -> None:
    t = BalloonType(name="ns", namespaces=("n*",), prefer_per_namespace_balloon=True)
    p = policy(tmp_path, t)
    placed = {}
    for name, ns in [("a", "n1"), ("b", "n2"), ("c", "n1")]:
        pod, c = guaranteed(name, 500, namespace=ns)
        p.create_container(pod, c)
        placed[name] = p.state.members.get(c.id).pool  # type: ignore[union-attr]
    assert placed == {"a": "ns[0]", "b": "ns[1]", "c": "ns[0]"}


def test_min_balloons_created_by_priority(tmp_path: Path) -> None:
    low = BalloonType(name="low", min_balloons=1, min_cpus=4, allocator_priority="low")
    high = BalloonType(name="high", min_balloons=2, min_cpus=2, allocator_priority="high")
    p = policy(tmp_path, low, high)
    got = balloons(p)
    # As upstream: a reserved quantity is a low-priority balloon of that size, created after
    # the high ones; balloons pack tightly (the fullest subtree that still fits first).
    assert {k: v for k, v in got.items() if k != "default[0]"} == {
        "high[0]": "0-1",
        "high[1]": "2-3",
        "reserved[0]": "4",
        "low[0]": "8-11",
    }


def test_shared_idle_cpus_follow_balloon_changes(tmp_path: Path) -> None:
    # The rule (shareIdleCPUsInSame: numa): an app container runs on its balloon's CPUs plus
    # the CPUs of the same NUMA node that no balloon holds; those follow every change.
    p = policy(tmp_path, APP, FULL)
    rt = Runtime(p)
    system = p.system

    def cpus(c: Container) -> CpuSet:
        return CpuSet.parse(rt.cpus[c.id] or "")

    def expected_app() -> CpuSet:
        b = p.state.by_name(p.state.members.get(s.id).pool)  # type: ignore[union-attr]
        assert b is not None
        node = CpuSet.union_all(system.nodes[n].cpus for n in system.nodes_of(b.cpus))
        return b.cpus | (p.state.free() & node)

    s = rt.create(burstable("s", 100, 200, namespace="app"))
    alone = cpus(s)
    assert alone == expected_app() and len(alone) > 1
    f = rt.create(guaranteed("f", 2000, namespace="full-a"))
    assert len(cpus(f)) == 2 and cpus(f).isdisjoint(cpus(s))
    assert rt.updated == [s.id] and cpus(s) == expected_app()
    g = rt.create(guaranteed("g", 2000, namespace="full-b"))
    assert cpus(g) == cpus(f) and len(cpus(g)) == 4 and rt.updated == [f.id]  # f's inflates
    assert cpus(s) == expected_app() and cpus(s).isdisjoint(cpus(g))
    rt.remove(g)
    rt.remove(f)
    assert cpus(s) == alone


@pytest.mark.parametrize(
    ("types", "kw", "message"),
    [
        ((FULL, FULL), {}, "spec.balloonTypes[1].name: duplicate balloon type 'full'"),
        ((), {"reserved": "17"}, "spec.reservedResources.cpu: '17' needs 17 CPUs"),
        (
            (),
            {"reserved": "cpuset:0-1", "available": "cpuset:2-15"},
            "not within the available",
        ),
        (
            (BalloonType(name="x", min_cpus=4, max_cpus=2),),
            {},
            "spec.balloonTypes[0]: minCPUs (4) exceeds maxCPUs (2)",
        ),
        (
            (BalloonType(name="x", min_balloons=3, min_cpus=6),),
            {},
            "cannot create 3 balloons of type 'x'",
        ),
    ],
)
def test_config_errors(
    tmp_path: Path, types: tuple[BalloonType, ...], kw: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as err:
        policy(tmp_path, *types, **kw)
    assert message in str(err.value)


def test_bad_reconfigure_keeps_old(tmp_path: Path) -> None:
    p = policy(tmp_path, FULL)
    rt = Runtime(p)
    rt.create(guaranteed("f", 2000, namespace="full-a"))
    before = balloons(p)
    with pytest.raises(ConfigError):
        p.reconfigure(balloons_spec(balloon_types=(FULL, FULL)))
    assert balloons(p) == before


def placements(p: BalloonsPolicy) -> dict[str, tuple[str, str]]:
    out = {}
    for a in p.state.members:
        b = p.state.by_name(a.pool)
        assert b is not None
        out[a.container_id] = (b.type.name, str(b.cpus))
    return out


@pytest.mark.parametrize("topology", sorted(TOPOLOGIES))
def test_restart_keeps_placement(tmp_path: Path, topology: str) -> None:
    types = (FULL, APP)
    layout = TOPOLOGIES[topology]
    old = policy(tmp_path, *types, layout=layout)
    rt = Runtime(old)
    for made in (
        besteffort("k", namespace="kube-system"),
        guaranteed("f1", 1000, namespace="full-a"),
        guaranteed("f2", 1500, namespace="full-b"),
        burstable("a1", 300, 600, namespace="app"),
        burstable("a2", 300, None, namespace="app"),
        besteffort("d1"),
    ):
        # On the small machines some find no balloon or no CPU: their creation fails.
        with contextlib.suppress(BalloonsError, PlacementError):
            rt.create(made)
    new = BalloonsPolicy()
    new.setup(old.state.spec, PolicyEnv(host_root=str(tmp_path)))
    pods, containers = rt.reported()
    assert new.synchronize(pods, containers) == []
    assert placements(new) == placements(old)
    # The restored balloons behave like the originals.
    victim = next(c for c in rt.containers.values() if c.id.startswith("f1"))
    pod = rt.pods[victim.pod_id]
    assert new.stop_container(pod, victim) == old.stop_container(pod, victim)


def test_restart_places_unknown_containers(tmp_path: Path) -> None:
    old = policy(tmp_path, FULL, layout=ONE_SOCKET_4CPU)
    rt = Runtime(old)
    f = rt.create(guaranteed("f", 1000, namespace="full-a"))
    pods, containers = rt.reported()
    late_pod, late = guaranteed("late", 1000, namespace="full-a")
    new = BalloonsPolicy()
    new.setup(old.state.spec, PolicyEnv(host_root=str(tmp_path)))
    updates = new.synchronize([*pods, late_pod], [*containers, late])
    # The late container joins f's balloon (same type, inflates it): both get updates.
    assert sorted(u.container_id for u in updates) == sorted([f.id, late.id])
    assert {u.adjustment.cpuset_cpus for u in updates} == {"1-2"}


def test_exhausted_machine_fails_the_creation_naming_the_shortage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    p = policy(tmp_path, FULL, layout=ONE_SOCKET_4CPU)
    rt = Runtime(p)
    rt.create(guaranteed("f", 3000, namespace="full-a"))
    late = besteffort("late")
    with caplog.at_level(logging.WARNING), pytest.raises(PlacementError) as err:
        rt.create(late)
    assert "default/late/c0: balloon default[0] has no CPU and none is free" in str(err.value)
    assert "default[0]: wanted 1 CPUs, got 0" in caplog.text
    assert late[1].id not in rt.containers and p.state.members.get(late[1].id) is None
