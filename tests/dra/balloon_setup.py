"""A node running the balloons policy with balloon types published as DRA devices (issue 38),
on the synthetic n4c16 machine (4 NUMA nodes of 4 CPUs, 2 sockets, SMT pairs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nri_resmgr.config.models import (
    BalloonType,
    BalloonTypeDra,
    ControlConfig,
    CpuClass,
    CpuControl,
    DraConfig,
    PolicySpec,
)
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.balloons import BalloonsPolicy
from nri_resmgr.policies.balloons.balloon import Balloon
from tests.dra.claim_setup import Node, claim_object, make_node
from tests.policies.workload import balloons_spec

BALLOONS_DRIVER = "balloons.nri.io"

FAST = BalloonType(name="fast", max_cpus=4, dra=BalloonTypeDra(publish=True))
WIDE = BalloonType(
    name="wide",
    max_cpus=8,
    allocator_priority="low",
    dra=BalloonTypeDra(publish=True, group_by="socket"),
)
NATIVE = BalloonType(name="native", max_cpus=4)


def dra_balloons_spec(*types: BalloonType, **kw: Any) -> PolicySpec:
    return balloons_spec(
        dra=DraConfig(enabled=True), balloon_types=types or (FAST, WIDE, NATIVE), **kw
    )


def balloons_node(root: Path, spec: PolicySpec | None = None) -> Node:
    return make_node(
        root,
        spec=spec or dra_balloons_spec(),
        policy_class=BalloonsPolicy,
        driver_name=BALLOONS_DRIVER,
    )


def balloon_claim(uid: str, device: str, cpus: int | str, **kw: Any) -> dict[str, Any]:
    """A claim the scheduler allocated from ``device``, consuming ``cpus`` CPUs."""
    return claim_object(
        uid, [device], driver=BALLOONS_DRIVER, shareID=f"share-{uid[-2:]}",
        consumedCapacity={"cpu": str(cpus)}, **kw,
    )  # fmt: skip


TURBO_KHZ, BASE_KHZ = 3_500_000, 2_000_000


def turbo_control() -> ControlConfig:
    """A CPU class ``turbo`` (cpufreq scaling_max_freq)."""
    return ControlConfig(cpu=CpuControl(classes={"turbo": CpuClass(max_freq=TURBO_KHZ)}))


def write_max_freq(root: Path, cpus: range) -> None:
    """cpufreq scaling_max_freq files at ``BASE_KHZ`` under ``root``'s sysfs."""
    for cpu in cpus:
        d = root / f"sys/devices/system/cpu/cpu{cpu}/cpufreq"
        d.mkdir(parents=True, exist_ok=True)
        (d / "scaling_max_freq").write_text(f"{BASE_KHZ}\n")


def max_freq(root: Path, cpu: int) -> int:
    return int((root / f"sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_max_freq").read_text())


def claim_balloons(node: Node) -> dict[str, Balloon]:
    """Claim UID -> its balloon."""
    return {b.claim: b for b in node.policy.state.balloons if b.claim}


def native_cpus(node: Node) -> CpuSet:
    return CpuSet.union_all(b.cpus for b in node.policy.state.balloons if not b.claim)


def capacities(node: Node) -> dict[str, int]:
    return {d.name: d.capacity["cpu"] for d in node.policy.dra_devices()}
