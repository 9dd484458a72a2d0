"""The CPU allocator's rules, one synthetic machine each (nri-plugins ``pkg/cpuallocator``
allocator.go; the Go parity test proves the same answers on random free sets)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_resmgr.cpus import Priority, allocate_cpus, release_cpus
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.sysfs import System, discover
from tests.cpuallocator.machines import MACHINES

N, H, L, X = Priority.NORMAL, Priority.HIGH, Priority.LOW, Priority.NONE


@pytest.fixture(scope="module")
def systems(tmp_path_factory: pytest.TempPathFactory) -> dict[str, System]:
    root = tmp_path_factory.mktemp("machines")
    wanted = {"n4c16", "n4c16-base-frequency", "hybrid", "epyc-ccx", "n4c128-l3"}
    return {m.name: discover(str(m.write(root / m.name))) for m in MACHINES if m.name in wanted}


CASES = [
    # (machine, free, count, priority, expected, the upstream rule)
    ("n4c16", "0-15", 8, X, "0-7", "takeIdlePackages: a whole idle package"),
    ("n4c16", "0-15", 9, X, "0-8", "a whole package, then one thread from the next"),
    ("n4c16", "1-15", 2, X, "2-3", "takeIdleCores: a whole idle core, not 1 and 2"),
    ("n4c16", "1-15", 1, X, "1", "takeIdleThreads: the core with fewest free threads"),
    ("n4c16", "0-13", 1, X, "0", "threads without a priority: lower package id"),
    ("n4c16", "0-13", 1, N, "8", "threads preferring normal: the tighter package (6 < 8)"),
    ("n4c16-base-frequency", "0-15", 2, H, "0-1", "high priority: higher base frequency"),
    ("n4c16-base-frequency", "0-15", 2, L, "4-5", "low priority: the lowest base frequency"),
    ("n4c16-base-frequency", "0-15", 6, H, "0-3,8-9", "a package's high CPUs count as idle"),
    ("hybrid", "0-11", 2, L, "8-9", "low priority: efficient cores"),
    ("hybrid", "0-11", 2, N, "0-1", "normal priority: performance cores"),
    ("epyc-ccx", "0-63", 16, X, "0-15", "takeCacheGroups: one whole idle L3 complex"),
    ("epyc-ccx", "4-63", 4, X, "16-19", "an idle L3 complex split before a used one"),
    ("epyc-ccx", "4-63", 20, X, "16-35", "idle complexes in group order, the last split"),
    ("epyc-ccx", "0-63", 2, X, "0-1", "cache groups only from 2 CPUs; 2 is a whole core"),
    ("n4c128-l3", "1-127", 8, X, "8-15", "test19's L3 caches: a whole idle one"),
]


@pytest.mark.parametrize(
    ("machine", "free", "count", "prio", "expected", "rule"), CASES, ids=[c[5] for c in CASES]
)
def test_allocation_rule(
    systems: dict[str, System],
    machine: str,
    free: str,
    count: int,
    prio: Priority,
    expected: str,
    rule: str,
) -> None:
    assert str(allocate_cpus(systems[machine], CpuSet.parse(free), count, prio)) == expected


def test_releasing_keeps_what_an_allocation_of_the_rest_would_pick(
    systems: dict[str, System],
) -> None:
    # ReleaseCpus: of 0-8, keeping 8 keeps the whole idle package 0-7 and gives back 8.
    assert release_cpus(systems["n4c16"], CpuSet.parse("0-8"), 1) == CpuSet([8])
    assert release_cpus(systems["n4c16"], CpuSet.parse("0-8"), 9) == CpuSet.parse("0-8")
    assert release_cpus(systems["n4c16"], CpuSet.parse("0-8"), 0) == CpuSet()


def test_priorities_come_from_base_frequency_epp_and_core_kind(tmp_path: Path) -> None:
    from nri_resmgr.cpus import topology_of

    for name, high, normal, low in (
        ("n4c16", "", "0-15", ""),
        ("n4c16-base-frequency", "0-3,8-11", "", "4-7,12-15"),
        ("n4c16-epp", "0-5,8-9", "", "6-7,10-15"),
        ("hybrid", "", "0-7", "8-11"),
    ):
        machine = next(m for m in MACHINES if m.name == name)
        system = discover(str(machine.write(tmp_path / name)))
        assert [str(c) for c in topology_of(system).priorities] == [high, normal, low], name
