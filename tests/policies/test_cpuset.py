from __future__ import annotations

from pathlib import Path

import pytest

from nri_resmgr.cpus.errors import AllocationError
from nri_resmgr.cpus.tight import pick_cpus
from nri_resmgr.cpuset import CpuSet, CpuSetError
from nri_resmgr.sysfs import discover
from tests.sysfs.fakesys import N4C16, write_sysfs


@pytest.mark.parametrize(
    ("text", "ids", "canonical"),
    [
        ("", [], ""),
        ("3", [3], "3"),
        ("0-3,8,10-11", [0, 1, 2, 3, 8, 10, 11], "0-3,8,10-11"),
        ("8,0-1,2", [0, 1, 2, 8], "0-2,8"),
        (" 1 , 3-4 \n", [1, 3, 4], "1,3-4"),
    ],
)
def test_parse_and_format(text: str, ids: list[int], canonical: str) -> None:
    cs = CpuSet.parse(text)
    assert list(cs) == ids
    assert str(cs) == canonical
    assert CpuSet.parse(str(cs)) == cs


@pytest.mark.parametrize("bad", ["1,,2", "3-1", "a", "1-", "-1", "0-99999999", "1.5"])
def test_parse_errors(bad: str) -> None:
    with pytest.raises(CpuSetError, match="invalid cpuset"):
        CpuSet.parse(bad)


def test_set_algebra() -> None:
    a, b = CpuSet.parse("0-3"), CpuSet.parse("2-5")
    assert a | b == CpuSet.parse("0-5")
    assert a & b == CpuSet.parse("2-3")
    assert a - b == CpuSet.parse("0-1")
    assert hash(CpuSet.parse("0-1")) == hash(CpuSet([1, 0]))


@pytest.mark.parametrize(
    ("available", "count", "expected"),
    [
        ("0-15", 2, "0-1"),  # a whole core
        ("1-15", 2, "2-3"),  # cpu 1 is a lone thread; keep whole cores whole
        ("1-15", 1, "1"),  # the lone thread goes first
        ("0-15", 4, "0-3"),  # one whole NUMA node
        ("2-15", 4, "4-7"),  # node 0 cannot hold 4, so the next node that can does
        ("3,4-7,8-15", 5, "3-7"),  # no node holds 5: within a package, lone thread first
        ("0-15", 16, "0-15"),
    ],
)
def test_pick_cpus_topology(tmp_path: Path, available: str, count: int, expected: str) -> None:
    system = discover(str(write_sysfs(tmp_path, N4C16)))
    assert pick_cpus(system, CpuSet.parse(available), count) == CpuSet.parse(expected)


def test_pick_too_many(tmp_path: Path) -> None:
    system = discover(str(write_sysfs(tmp_path, N4C16)))
    with pytest.raises(AllocationError, match="need 5 CPUs, only 4"):
        pick_cpus(system, CpuSet.parse("0-3"), 5)
