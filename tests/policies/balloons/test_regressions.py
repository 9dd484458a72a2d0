"""Regressions the balloons state machine (tests/policies/test_state_machine.py) found, each
as the shortest sequence that showed it."""

from __future__ import annotations

from pathlib import Path

from nri_resmgr.resmgr.cpuset import CpuSet
from nri_resmgr.resmgr.policies.balloons import BalloonsPolicy
from tests.policies.workload import Runtime, balloons_spec, guaranteed, start
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
    # a reserved cpuset without its CPU (it falls back to default), then the first again:
    # its type changes back, it is placed afresh with pinCPU off, nothing is sent, so the
    # policy must still believe what the runtime holds, not "unpinned".
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
