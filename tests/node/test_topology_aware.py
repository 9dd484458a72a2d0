"""nri-plugins' topology-aware e2e scenarios, replayed on the real node: the same scenario
functions as the in-process replays (tests/policies/topology_aware_e2e), with every pod
created through CRI in the n4c16 guest and every ``verify`` evaluated on what its kernel
holds. All of these need more than the host's two CPUs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from _pytest.mark import ParameterSet

from tests.node.conftest import boot, core
from tests.node.session import Nodes
from tests.policies.topology_aware_e2e import test_n4c16 as n4c16
from tests.policies.topology_aware_e2e.topologies import N4C16

REPLAYS: list[Callable[[Path], None] | ParameterSet] = [
    n4c16.test00_pod0_isolated_eligible_spread,
    n4c16.test00_pod1_hide_hyperthreads,
    n4c16.test00_pod3_init_containers_freed,
    n4c16.test01_guaranteed_fit,
    n4c16.test02_shrink_and_grow_shared,
    n4c16.test03_pod1_affinities,
    n4c16.test04_available_cpuset,
    n4c16.test05_reserved_across_nodes,
    core(n4c16.test07_mixed_allocations),
    n4c16.test10_reserved_pool_namespaces,
    n4c16.test11_prefer_reserved,
    n4c16.test11_preserve,
    n4c16.test14_burstable_memory_limits,
    n4c16.test14_burstable_cpu_limits,
    n4c16.test14_unlimited_burstable_annotation,
    n4c16.test16_idle_shared_pools_sliced_empty,
]


@pytest.mark.parametrize("replay", REPLAYS, ids=lambda f: getattr(f, "__name__", None))
def test_on_the_real_node(
    replay: Callable[[Path], None], nodes: Nodes, replays: None, tmp_path: Path
) -> None:
    boot(nodes, N4C16, "n4c16")
    replay(tmp_path)


def test18_strict_alignment_on_the_real_node(
    nodes: Nodes, replays: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The daemon gets ENABLE_TEST_APIS as upstream's chart sets it; the strict-hint refusal
    # comes back as containerd's error on CreateContainer.
    monkeypatch.setenv("ENABLE_TEST_APIS", "1")
    boot(nodes, N4C16, "n4c16")
    n4c16.strict_alignment(tmp_path)
