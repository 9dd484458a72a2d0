"""The balloons CPU tree's rules, one at a time, on the n4c16 machine (2 packages x 2 NUMA
nodes x 2 cores x 2 threads: node 0 = CPUs 0-3, cores {0,1} and {2,3}; node 1 = 4-7).
Expectations follow the rules in ``cputree``'s docstring, not recorded output."""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.balloons import cputree
from nri_resmgr.policies.balloons.cputree import Load, Options
from nri_resmgr.sysfs import System, discover
from tests.sysfs.fakesys import N4C16, write_sysfs

NODE_L2 = {c: CpuSet(range(c // 4 * 4, c // 4 * 4 + 4)) for c in range(16)}
"""An L2 cache per NUMA node (two cores share it)."""


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> System:
    root = tmp_path_factory.mktemp("n4c16")
    write_sysfs(Path(root), N4C16)
    return discover(str(root))


def test_a_domain_without_l2_information_is_the_core(system: System) -> None:
    assert cputree.domain(system, Options(), "l2cache", CpuSet({0, 5})) == CpuSet({0, 1, 4, 5})
    assert cputree.domain(system, Options(l2=NODE_L2), "l2cache", CpuSet({5})) == CpuSet(
        range(4, 8)
    )
    assert cputree.domain(system, Options(l2=NODE_L2), "core", CpuSet({5})) == CpuSet({4, 5})


def test_equal_subtrees_are_released_from_the_last_one() -> None:
    names = [cputree._Desc("a"), cputree._Desc("c"), cputree._Desc("b")]
    assert min(names) == "c"
    assert sorted(names) == ["c", "b", "a"]


def test_shrink_gives_back_from_the_subtree_holding_fewest_of_the_balloons_cpus(
    system: System,
) -> None:
    held = CpuSet({0, 2, 3, 4, 5})  # 3 CPUs in node 0, 2 in node 1
    free = system.online - held
    assert cputree.shrink(system, held, free, 1, Options()) == CpuSet({5})
    # Precomputed tree paths change nothing.
    paths = cputree.tree_paths(system, Options())
    assert cputree.shrink(system, held, free, 1, Options(paths=paths)) == CpuSet({5})
    assert cputree.shrink(system, held, free, 2, Options()) == CpuSet({4, 5})


def test_shrink_then_gives_back_where_fewer_cpus_are_free(system: System) -> None:
    # One balloon CPU per node; node 0 has one free CPU, node 1 three: node 0's goes.
    held = CpuSet({0, 4})
    assert cputree.shrink(system, held, CpuSet({1, 5, 6, 7}), 1, Options()) == CpuSet({0})
    assert cputree.shrink(system, held, CpuSet({1, 2, 3, 5}), 1, Options()) == CpuSet({4})


def test_a_static_load_does_not_grow_with_the_balloon(system: System) -> None:
    # Dynamic core load: the second CPU avoids the first one's core; the L2 load is not
    # dynamic, so the second CPU stays in the same L2 (node), close to the first.
    loads = (Load("core", CpuSet(), dynamic=True), Load("l2cache", CpuSet(), dynamic=False))
    got = cputree.grow(system, CpuSet(), system.online, 2, Options(l2=NODE_L2, loads=loads))
    assert got is not None and len(got) == 2
    a, b = sorted(got)
    assert system.core_of(a) != system.core_of(b)
    assert NODE_L2[a] == NODE_L2[b]


def test_a_dynamic_l2_load_spreads_over_l2_caches(system: System) -> None:
    loads = (Load("l2cache", CpuSet(), dynamic=True),)
    got = cputree.grow(system, CpuSet(), system.online, 2, Options(l2=NODE_L2, loads=loads))
    assert got is not None and len(got) == 2
    a, b = sorted(got)
    assert NODE_L2[a] != NODE_L2[b]


def test_grow_edges(system: System) -> None:
    free = CpuSet({1, 2, 3})
    assert cputree.grow(system, CpuSet({0}), free, 0, Options()) == CpuSet()
    assert cputree.grow(system, CpuSet({0}), free, 4, Options()) is None
    assert cputree.grow(system, CpuSet({0}), free, 3, Options()) == free
    # Next to what it has: the other thread of CPU 0's core.
    assert cputree.grow(system, CpuSet({0}), free, 1, Options()) == CpuSet({1})
