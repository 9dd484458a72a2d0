"""Balloons state rules, one at a time (sizes, idle-CPU sharing scopes, the refresh record),
on n4c16: package 0 = CPUs 0-7 (node 0 = 0-3, node 1 = 4-7), cores {0,1}, {2,3}, ..."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from nri_resmgr.config.models import BalloonsSpec, BalloonType
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.allocations import Allocation, Kind
from nri_resmgr.policies.balloons import fill
from nri_resmgr.policies.balloons.state import Balloons, target_cpus
from nri_resmgr.sysfs import System, discover
from tests.sysfs.fakesys import N4C16, write_sysfs


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> System:
    root = tmp_path_factory.mktemp("n4c16")
    write_sysfs(Path(root), N4C16)
    return discover(str(root))


@pytest.mark.parametrize(
    ("min_cpus", "max_cpus", "requested", "members", "want"),
    [
        (0, 0, 0, True, 1),  # a member always has one CPU
        (0, 0, 1000, True, 1),
        (0, 0, 1001, True, 2),
        (0, 0, 1500, True, 2),
        (0, 0, 0, False, 0),  # empty: minCPUs
        (2, 0, 0, False, 2),
        (2, 0, 500, True, 2),
        (0, 3, 5000, True, 3),  # maxCPUs caps
        (1, 3, 2500, True, 3),
        (0, 1, 2000, True, 1),
    ],
)
def test_target_cpus(
    min_cpus: int, max_cpus: int, requested: int, members: bool, want: int
) -> None:
    t = BalloonType(name="t", min_cpus=min_cpus, max_cpus=max_cpus)
    assert target_cpus(t, requested, members) == want


def test_single_threads_keeps_the_lowest_thread_of_each_core(system: System) -> None:
    assert system.single_threads(CpuSet({1, 2, 3, 5})) == CpuSet({1, 2, 5})


def _state(system: System, scope: str, **kw: object) -> Balloons:
    t = BalloonType(name="t", share_idle_cpus_in_same=scope)  # type: ignore[arg-type]
    spec = BalloonsSpec(balloon_types=(t,), **kw)  # type: ignore[arg-type]
    return Balloons(system, spec, system.online, CpuSet(), types=(t,))


@pytest.mark.parametrize(
    ("scope", "shared"),
    [
        ("", ""),
        ("thread", ""),
        ("core", "3"),
        ("numa", "0-1,3"),
        ("die", "0-1,3-7"),
        ("package", "0-1,3-7"),
        ("system", "0-1,3-15"),
        ("l2cache", "3"),  # no L2 information: the core
    ],
)
def test_idle_cpus_are_shared_within_the_scope(system: System, scope: str, shared: str) -> None:
    state = _state(system, scope)
    b = state.create(state.types[0], cpus=CpuSet({2}))
    assert b is not None
    assert state.idle_shared(b, state.free()) == CpuSet.parse(shared)
    cpus, _ = state.desired(b, state.free())
    assert cpus == CpuSet({2}) | CpuSet.parse(shared)


def _member(state: Balloons, cid: str, cpus: str) -> Allocation:
    b = state.balloons[0]
    a = Allocation(cid, f"pod-{cid}", f"ns/{cid}/c", "", Kind.SHARED, 500)
    state.join(b, a, "ns", fit=False)
    state.members.store_checked(attrs.evolve(state.members.get(cid), cpus=CpuSet.parse(cpus)))  # type: ignore[arg-type]
    return a


def test_refresh_checks_what_was_written_outside_it(system: System) -> None:
    state = _state(system, "", pin_memory=False)
    b = state.create(state.types[0], cpus=CpuSet({2, 3}))
    assert b is not None
    _member(state, "a", "2-3")
    _member(state, "b", "2-3")
    assert state.refresh() == []
    # Another writer forgets what "b" holds (a failed update): the next refresh resends it.
    state.members.put(attrs.evolve(state.members.get("b"), cpus=None))  # type: ignore[arg-type]
    (update,) = state.refresh()
    assert (update.container_id, update.adjustment.cpuset_cpus) == ("b", "2-3")
    assert state.refresh() == []


def test_a_skipped_member_is_checked_by_the_next_refresh(system: System) -> None:
    state = _state(system, "", pin_memory=False)
    b = state.create(state.types[0], cpus=CpuSet({2, 3}))
    assert b is not None
    _member(state, "a", "2-3")
    state.members.put(attrs.evolve(state.members.get("a"), cpus=CpuSet({9})))  # type: ignore[arg-type]
    assert state.refresh(skip="a") == []
    assert [u.container_id for u in state.refresh()] == ["a"]


def test_a_changed_balloon_updates_all_its_members_in_id_order(system: System) -> None:
    state = _state(system, "", pin_memory=False)
    b = state.create(state.types[0], cpus=CpuSet({2, 3}))
    assert b is not None
    for cid in ("c", "a", "b"):
        _member(state, cid, "2-3")
    assert state.refresh() == []
    b.cpus = CpuSet({2})
    updates = state.refresh()
    assert [(u.container_id, u.adjustment.cpuset_cpus) for u in updates] == [
        ("a", "2"), ("b", "2"), ("c", "2")
    ]  # fmt: skip


def test_a_member_outside_every_balloon_makes_refresh_walk_everything(system: System) -> None:
    state = _state(system, "", pin_memory=False)
    b = state.create(state.types[0], cpus=CpuSet({2, 3}))
    assert b is not None
    _member(state, "a", "2-3")
    assert state.refresh() == []
    # Bookkeeping out of step (a member the balloon does not list): nothing is trusted.
    state.members.store_checked(
        Allocation("x", "pod-x", "ns/x/c", "t[9]", Kind.SHARED, 100, cpus=CpuSet({7}))
    )
    b.members.pop("a")
    state.members.store_checked(attrs.evolve(state.members.get("a"), cpus=CpuSet({9})))  # type: ignore[arg-type]
    b.members["a"] = 500
    assert state.members.verified and "a" not in state.members.dirty
    updates = state.refresh()
    assert [(u.container_id, u.adjustment.cpuset_cpus) for u in updates] == [("a", "2-3")]


def test_an_empty_balloon_too_small_to_grow_is_no_new_balloon(tmp_path: Path) -> None:
    from nri_resmgr.policies.balloons import BalloonsPolicy
    from nri_resmgr.policies.balloons.types import BalloonsError
    from tests.policies.workload import Runtime, balloons_spec, guaranteed, start

    # minBalloons keeps an empty "t" balloon; the default balloon takes all but one free
    # CPU. A 3-CPU request of type "t" fits nowhere: it fails instead of landing in the
    # empty balloon, which can grow by one CPU only.
    t = BalloonType(name="t", namespaces=("t",), min_balloons=1)
    p = BalloonsPolicy()
    start(p, tmp_path, N4C16, balloons_spec(balloon_types=(t,)))
    rt = Runtime(p)
    rt.create(guaranteed("big", 14000))
    assert len(p.state.free()) == 1
    with pytest.raises(BalloonsError, match="no suitable balloon instance available"):
        p.create_container(*guaranteed("t3", 3000, namespace="t"))
    # One CPU it can still take.
    c = rt.create(guaranteed("t1", 1000, namespace="t"))
    a = p.state.members.get(c.id)
    assert a is not None and a.pool == "t[0]"


def test_choose_ranks_by_room_without_then_with_inflation(system: System) -> None:
    # b0: 2 CPUs, 1400m requested (room 600m now, 1600m grown to maxCPUs 3);
    # b1: 1 CPU, 500m (room 500m now, 2500m grown). Both in group "g".
    t = BalloonType(name="t", max_cpus=3, max_balloons=2)
    state = Balloons(system, BalloonsSpec(balloon_types=(t,)), system.online, CpuSet(), types=(t,))
    b0 = state.create(t, cpus=CpuSet({0, 1}))
    b1 = state.create(t, cpus=CpuSet({4}))
    assert b0 is not None and b1 is not None
    for b, cid, req in ((b0, "x", 1400), (b1, "y", 500)):
        b.members[cid], b.pods[cid], b.groups[cid] = req, f"pod-{cid}", "g"
    # Fits both as they are: the most room as they are wins (not the most after growing).
    assert fill.choose(state, t, "pod-new", "ns", 400) is b0
    assert fill.choose(state, t, "pod-new", "ns", 400, group="g") is b0
    # Fits only by growing: the most room once grown wins.
    assert fill.choose(state, t, "pod-new", "ns", 1000) is b1
    assert fill.choose(state, t, "pod-new", "ns", 1000, group="g") is b1


@pytest.mark.parametrize("reserved", ["0", "5", "15"])
def test_the_reserved_balloon_gives_back_other_cpus_first(tmp_path: Path, reserved: str) -> None:
    from nri_resmgr.policies.balloons import BalloonsPolicy
    from tests.policies.workload import Runtime, balloons_spec, guaranteed, start

    p = BalloonsPolicy()
    start(p, tmp_path, N4C16, balloons_spec(f"cpuset:{reserved}"))
    rt = Runtime(p)
    big = rt.create(guaranteed("big", 3000, namespace="kube-system"))
    (b,) = [b for b in p.state.balloons if b.name == "reserved[0]"]
    assert len(b.cpus) == 3 and int(reserved) in b.cpus
    rt.remove(big)
    assert b.cpus == CpuSet({int(reserved)})
