"""Regressions the balloons state machine (tests/policies/test_state_machine.py) found, each
as the shortest sequence that showed it."""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_resmgr.config.models import BalloonType
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.balloons import BalloonsPolicy
from tests.policies.workload import Runtime, balloons_spec, burstable, guaranteed, running, start
from tests.sysfs.fakesys import Layout

THREE_SMALL_PACKAGES = Layout(packages=3, cores_per_node=1, threads=2, isolated="0")
"""The machine the 500-example run failed on: 3 packages x 1 core x 2 threads."""


def _held(rt: Runtime, p: BalloonsPolicy, cid: str) -> tuple[CpuSet | None, CpuSet | None]:
    a = p.state.members.get(cid)
    assert a is not None
    return a.cpus, a.mems


def _runtime_has(rt: Runtime, cid: str) -> tuple[CpuSet | None, CpuSet | None]:
    return tuple(None if v is None else CpuSet.parse(v) for v in rt.placement(rt.containers[cid]))  # type: ignore[return-value]


def test_a_type_change_on_reconfigure_keeps_what_the_runtime_holds_in_view(
    tmp_path: Path,
) -> None:
    # pinCPU off, then on (the kube-system container is pinned to the reserved balloon), then
    # a reserved cpuset without its CPU (it is placed afresh: once it fell back to default,
    # now it joins the new reserved balloon), then the first again: with pinCPU off nothing
    # is sent, so the policy must still believe what the runtime holds, not "unpinned".
    unpinned = balloons_spec("750m", pin_cpu=False, pin_memory=False)
    p = BalloonsPolicy()
    start(p, tmp_path, THREE_SMALL_PACKAGES, unpinned)
    rt = Runtime(p)
    c = rt.create(guaranteed("k", 250, namespace="kube-system"))
    for spec in (
        balloons_spec("750m", pin_cpu=True, pin_memory=False),
        balloons_spec("cpuset:0", pin_cpu=False, pin_memory=False),
        unpinned,
    ):
        rt.apply(p.reconfigure(spec))
        assert _held(rt, p, c.id) == _runtime_has(rt, c.id)
    assert rt.cpus[c.id] is not None  # pinned once, the runtime keeps it


def test_restore_places_the_containers_that_held_cpus_before_the_unpinned_ones(
    tmp_path: Path,
) -> None:
    # After a restart the reserved CPU 0 sits under the default containers' cpuset, so they
    # are placed afresh, like the app container the runtime reports unpinned (pinCPU was off
    # when it came). Placed first, that one opened a new app balloon (preferNewBalloons) on a
    # CPU the default containers needed: p5 was refused and left unmanaged, and a later
    # reconfiguration with pinCPU on never moved it off the other balloons' CPUs.
    machine = Layout(packages=4, cores_per_node=1, threads=2)
    app = BalloonType(name="app", namespaces=("app",), prefer_new_balloons=True)
    spec = balloons_spec("cpuset:0", pin_cpu=False, pin_memory=False, balloon_types=(app,))
    p = BalloonsPolicy()
    start(p, tmp_path, machine, spec)
    shared = "0-2,5-7"
    reported = [
        (guaranteed("p1", 250), shared),
        (guaranteed("p2", 250), shared),
        (guaranteed("p3", 2500), shared),
        (guaranteed("p4", 250, namespace="app"), "4"),
        (guaranteed("p5", 2500), shared),
        (guaranteed("p7", 250, namespace="app"), None),
    ]
    pods = [pc[0] for pc, _ in reported]
    containers = [running(pc[1], cpus, None) for pc, cpus in reported]
    p.synchronize(pods, containers)
    unmanaged = [c.name for c, (pc, _) in zip(containers, reported, strict=True)
                 if p.state.members.get(c.id) is None]  # fmt: skip
    assert unmanaged == []
    # 1 reserved + 1 app CPU + 6 for 5500 mCPU of default containers: every CPU is used.
    assert sorted(len(b.cpus) for b in p.state.balloons) == [1, 1, 6]


def test_a_second_reserved_class_cpuset_is_restored_where_it_runs(tmp_path: Path) -> None:
    # reservedResources is a quantity, so no CPU is reserved as such. Two kube-system
    # containers run on different cpusets: one in the reserved balloon, one that fell back
    # to the default balloon in an earlier reconfiguration. There is one reserved balloon,
    # so the second cpuset is the fallback's: restored there, not moved into the reserved
    # balloon (which made both containers change CPUs on a restart).
    p = BalloonsPolicy()
    start(p, tmp_path, THREE_SMALL_PACKAGES, balloons_spec("1", pin_memory=False))
    reserved_one, fell_back = (
        guaranteed("r", 250, namespace="kube-system"),
        guaranteed("f", 1500, namespace="kube-system"),
    )
    placed = [(reserved_one, "1"), (fell_back, "3-4")]
    pods = [pc[0] for pc, _ in placed]
    containers = [running(pc[1], cpus, None) for pc, cpus in placed]
    updates = p.synchronize(pods, containers)
    assert updates == []
    held = {a.name: str(a.cpus) for a in p.state.members}
    assert held == {"kube-system/r/c0": "1", "kube-system/f/c0": "3-4"}
    assert {b.name for b in p.state.balloons if b.members} == {"reserved[0]", "default[0]"}


@pytest.mark.parametrize("how", ["restart", "reconfigure"])
def test_another_reserved_cpuset_moves_kube_system_onto_it(tmp_path: Path, how: str) -> None:
    # The guest found it replaying upstream's test01 then test03 on one node: the control
    # plane's kube-system containers ran on test01's reserved CPU when the daemon restarted
    # with test03's reserved 0-2. Restored in the default balloon, they kept CPU 7 there, and
    # a 2500m default container joining them got 4 CPUs (their 850m and its own) instead of 3.
    machine = Layout(packages=2, cores_per_node=2, threads=2)
    old = BalloonsPolicy()
    start(old, tmp_path, machine, balloons_spec("cpuset:7", pin_memory=False))
    rt = Runtime(old)
    control_plane = [
        rt.create(burstable(name, milli, namespace="kube-system"))
        for name, milli in (("apiserver", 250), ("controller", 200), ("scheduler", 100),
                            ("etcd", 100), ("coredns-a", 100), ("coredns-b", 100))
    ]  # fmt: skip
    assert {rt.cpus[c.id] for c in control_plane} == {"7"}
    # A live reconfiguration re-places them the same way (topology-aware does too).
    changed = balloons_spec("cpuset:0-2", pin_memory=False)
    if how == "reconfigure":
        rt.apply(old.reconfigure(changed))
    else:
        new = BalloonsPolicy()
        start(new, tmp_path, machine, changed)
        rt.policy = new
        rt.apply(new.synchronize(*rt.reported()))
    assert {rt.cpus[c.id] for c in control_plane} == {"0-2"}
    app = rt.create(guaranteed("app", 2500))
    assert len(CpuSet.parse(rt.cpus[app.id] or "")) == 3
    assert CpuSet.parse(rt.cpus[app.id] or "").isdisjoint(CpuSet.parse("0-2"))


FOUR_CPUS = Layout(packages=1, nodes_per_die=2, cores_per_node=2, threads=1)
"""The machine both of the next two were found on (1,500 random examples of 40 steps)."""


def test_a_restart_makes_the_reserved_balloon_with_the_cpus_left(tmp_path: Path) -> None:
    # Three allowed CPUs, 2000m of default containers on two of them, and the reserved
    # balloon's only member stopped: restored, the reserved balloon is made afresh and wants
    # 2 CPUs (reservedResources: 2) where one is free. Synchronize raised ConfigError, so
    # the daemon could never sync with the runtime again.
    spec = balloons_spec("2", available="exclude-cpuset:3", pin_memory=False)
    p = BalloonsPolicy()
    start(p, tmp_path, FOUR_CPUS, spec)
    placed = [guaranteed(f"d{i}", 500) for i in range(4)]
    pods = [pod for pod, _ in placed]
    containers = [running(c, "1-2", None) for _, c in placed]
    assert p.synchronize(pods, containers) == []
    balloons = {b.name: str(b.cpus) for b in p.state.balloons}
    assert balloons == {"reserved[0]": "0", "default[0]": "1-2"}


def test_a_reserved_balloon_short_of_cpus_takes_those_a_leaving_container_frees(
    tmp_path: Path,
) -> None:
    # reservedResources grew to 2 CPUs while default containers held the others: the
    # reserved balloon got one. When a default container left, it stayed at one, and a
    # restart (fitting every balloon) then moved its member.
    p = BalloonsPolicy()
    spec = balloons_spec("750m", available="exclude-cpuset:3", pin_memory=False)
    start(p, tmp_path, FOUR_CPUS, spec)
    rt = Runtime(p)
    ks = rt.create(guaranteed("ks", 250, namespace="kube-system"))
    rt.create(guaranteed("d1", 1000))
    d2 = rt.create(guaranteed("d2", 1000))
    rt.apply(p.reconfigure(balloons_spec("2", available="exclude-cpuset:3", pin_memory=False)))
    assert len(CpuSet.parse(rt.cpus[ks.id] or "")) == 1
    rt.remove(d2)
    assert len(CpuSet.parse(rt.cpus[ks.id] or "")) == 2
    fresh = BalloonsPolicy()
    start(fresh, tmp_path, FOUR_CPUS, balloons_spec("2", available="exclude-cpuset:3",
                                                    pin_memory=False))  # fmt: skip
    assert fresh.synchronize(*rt.reported()) == []
