"""balloons ``memoryTypes``: a balloon's memory nodes are those of its types closest to its CPUs
(the memory-type detection shared with topology-aware), on upstream's n6-hbm-cxl topology:
nodes 0-1 DRAM with CPUs 0-3 and 4-7, 2-3 HBM, 4-5 PMEM."""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_resmgr.config.models import BalloonType
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.errors import ConfigError
from nri_resmgr.policies.balloons import BalloonsPolicy
from tests.policies.workload import Runtime, balloons_spec, guaranteed, start
from tests.sysfs.fakesys import N4C16, N6_HBM_CXL, Layout

ANN = "balloon.balloons.resource-policy.nri.io"


def policy(tmp_path: Path, *types: BalloonType, layout: Layout = N6_HBM_CXL) -> BalloonsPolicy:
    p = BalloonsPolicy()
    start(p, tmp_path, layout, balloons_spec(balloon_types=types))
    return p


@pytest.mark.parametrize(
    ("memory_types", "node0", "node1"),
    [
        ((), {0}, {1}),
        (("HBM",), {2}, {3}),
        (("PMEM",), {4}, {5}),
        (("DRAM", "PMEM"), {0, 4}, {1, 5}),
        (("hbm", "dram"), {0, 2}, {1, 3}),
        (("DRAM", "PMEM", "HBM"), {0, 2, 4}, {1, 3, 5}),
    ],
)
def test_balloon_memory_types_choose_the_mems(
    tmp_path: Path, memory_types: tuple[str, ...], node0: set[int], node1: set[int]
) -> None:
    t = BalloonType(name="mem", memory_types=memory_types, min_cpus=2, max_cpus=2)
    rt = Runtime(policy(tmp_path, t))
    pod, c = guaranteed("g", 1000, annotations={ANN: "mem"})
    rt.create((pod, c))
    cpus, mems = rt.placement(c)
    assert cpus is not None and mems is not None
    on_node0 = CpuSet.parse(cpus).issubset(CpuSet(range(4)))
    assert set(CpuSet.parse(mems)) == (node0 if on_node0 else node1), (cpus, mems)


def test_memory_types_on_a_dram_only_machine_keep_the_dram(tmp_path: Path) -> None:
    # No node of the wanted type: the balloon keeps the memory closest to its CPUs.
    t = BalloonType(name="mem", memory_types=("HBM",), min_cpus=2, max_cpus=2)
    rt = Runtime(policy(tmp_path, t, layout=N4C16))
    pod, c = guaranteed("g", 1000, annotations={ANN: "mem"})
    rt.create((pod, c))
    cpus, mems = rt.placement(c)
    assert cpus is not None and mems is not None
    assert mems == str(min(CpuSet.parse(cpus)) // 4)  # n4c16: 4 CPUs per node


def test_an_unknown_memory_type_is_a_config_error(tmp_path: Path) -> None:
    t = BalloonType(name="mem", memory_types=("DRAM", "FLASH"))
    with pytest.raises(ConfigError, match=r"balloonTypes\[0\]\.memoryTypes: unknown memory type"):
        policy(tmp_path, t)


def test_memory_type_annotation_overrides_the_balloon_types(tmp_path: Path) -> None:
    t = BalloonType(name="mem", memory_types=("DRAM",), min_cpus=2, max_cpus=2)
    rt = Runtime(policy(tmp_path, t))
    plain_pod, plain = guaranteed("plain", 100, annotations={ANN: "mem"})
    hbm_pod, hbm = guaranteed(
        "hbm",
        100,
        annotations={ANN: "mem", "memory-type.resource-policy.nri.io/container.c0": "hbm"},
    )
    rt.create((plain_pod, plain))
    rt.create((hbm_pod, hbm))
    cpus, _ = rt.placement(hbm)
    assert cpus is not None
    on_node0 = CpuSet.parse(cpus).issubset(CpuSet(range(4)))
    assert rt.placement(hbm)[1] == ("2" if on_node0 else "3")
    assert rt.placement(plain)[1] in ("0", "1")
