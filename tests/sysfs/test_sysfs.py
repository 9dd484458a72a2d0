from __future__ import annotations

from pathlib import Path

import pytest

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.sysfs import SysfsError, discover
from tests.sysfs.fakesys import FOUR_NUMA_DIES, N4C16, N4C16_ISOLATED, SPARSE, Layout, write_sysfs


def test_n4c16_topology(tmp_path: Path) -> None:
    system = discover(str(write_sysfs(tmp_path, N4C16)))
    assert system.online == CpuSet.parse("0-15")
    assert system.packages() == [0, 1]
    assert system.package_cpus(1) == CpuSet.parse("8-15")
    assert system.core_of(5) == CpuSet.parse("4-5")
    assert sorted(system.nodes) == [0, 1, 2, 3]
    assert system.nodes[2].cpus == CpuSet.parse("8-11")
    assert system.nodes[0].memory == 2 << 30
    assert system.nodes[0].distances == {0: 10, 1: 12, 2: 21, 3: 21}
    assert system.isolated == CpuSet()


def test_dies_and_isolated(tmp_path: Path) -> None:
    dies = discover(str(write_sysfs(tmp_path / "a", FOUR_NUMA_DIES)))
    assert dies.dies(0) == [0, 1]
    assert dies.die_cpus(0, 1) == CpuSet.parse("8-15")
    assert dies.nodes_of(CpuSet.parse("8-15")) == [2, 3]
    iso = discover(str(write_sysfs(tmp_path / "b", N4C16_ISOLATED)))
    assert iso.isolated == CpuSet.parse("14-15")


def test_sparse_ids(tmp_path: Path) -> None:
    system = discover(str(write_sysfs(tmp_path, SPARSE)))
    assert system.online == CpuSet.parse("0-1,4-5,64-67")
    assert system.core_of(65) == CpuSet.parse("64-65")
    assert system.nodes[1].cpus == CpuSet.parse("64-67")


def test_memoryless_node_borrows_closest_memory(tmp_path: Path) -> None:
    layout = Layout(packages=2, nodes_per_die=2, cores_per_node=1, memoryless_nodes=(1,))
    system = discover(str(write_sysfs(tmp_path, layout)))
    assert system.nodes[1].memory == 0
    assert system.closest_memory(system.nodes[1].cpus) == CpuSet([0])


def test_missing_sysfs_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SysfsError, match="online"):
        discover(str(tmp_path))


def test_bad_distance_file(tmp_path: Path) -> None:
    write_sysfs(tmp_path, N4C16)
    (tmp_path / "sys/devices/system/node/node0/distance").write_text("10 x\n")
    with pytest.raises(SysfsError, match="distance"):
        discover(str(tmp_path))


def test_real_machine() -> None:
    system = discover("")
    assert len(system.online) >= 1
    assert system.nodes
    assert all(system.cpus[c].threads for c in system.online)
