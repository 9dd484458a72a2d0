"""nri-plugins' balloons e2e scenarios, replayed on the real node: the same scenario functions
as the in-process replays (tests/policies/balloons), with every pod created through CRI in
the n4c16 guest and every check made on the CPUs its kernel allows each container. All of
these need more than the host's two CPUs; test16 is upstream's whole composite-balloons
file, to its balance-balloons end."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from _pytest.mark import ParameterSet

from tests.node.conftest import boot, core
from tests.node.session import Nodes
from tests.policies.balloons import test_e2e_n4c16 as n4c16
from tests.policies.balloons import test_e2e_n4c16_more as more
from tests.policies.topology_aware_e2e.topologies import N4C16

REPLAYS: list[Callable[[Path], None] | ParameterSet] = [
    n4c16.test01_basic_placement,
    n4c16.test03_reserved,
    n4c16.test05_namespace,
    n4c16.test07_maxballoons,
    core(n4c16.test08_numa),
    n4c16.test10_allocator_opts,
    n4c16.test11_match_expression,
    more.test16_composite_balloons,
    n4c16.test23_available_cpus,
]


@pytest.mark.parametrize("replay", REPLAYS, ids=lambda f: getattr(f, "__name__", None))
def test_on_the_real_node(
    replay: Callable[[Path], None], nodes: Nodes, replays: None, tmp_path: Path
) -> None:
    boot(nodes, N4C16, "n4c16")
    replay(tmp_path)
