"""A subset of the topology-aware replays once more through the simulated runtime: pods
travel over NRI (unix socket, ttrpc) to the plugin's ResourceManager, and the checks read
what the runtime side holds after applying the plugin's adjustments and updates."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.policies.replay.simulated import replay_simulated
from tests.policies.topology_aware_e2e import scenario, test_n4c16, test_other_topologies

REPLAYS: list[Callable[[Path], None]] = [
    test_n4c16.test00_pod0_isolated_eligible_spread,
    test_n4c16.test00_pod3_init_containers_freed,
    test_n4c16.test04_available_cpuset,
    test_n4c16.test05_reserved_across_nodes,
    test_n4c16.test09_container_exit,
    test_n4c16.test10_reserved_pool_namespaces,
    test_n4c16.test11_prefer_reserved,
    test_n4c16.test14_global_shared_preference,
    test_n4c16.test30_numa_disabled,
    test_other_topologies.test01_sparse_4kcpus_all_cpus_used,
]


@pytest.mark.parametrize("replay", REPLAYS, ids=lambda f: f.__name__)
def test_through_the_simulated_runtime(
    replay: Callable[[Path], None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    replay_simulated(scenario, monkeypatch, replay, tmp_path)


def test18_strict_alignment_through_the_simulated_runtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The strict-hint refusal travels back over NRI as the container's creation error.
    monkeypatch.setenv("ENABLE_TEST_APIS", "1")
    replay_simulated(scenario, monkeypatch, test_n4c16.strict_alignment, tmp_path)
