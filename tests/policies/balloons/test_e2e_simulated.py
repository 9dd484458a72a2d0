"""The same upstream scenarios once more, through the simulated runtime: pods and
containers travel over NRI (unix socket, ttrpc) to the plugin, and the CPUs checked are
those the runtime side holds after applying the plugin's adjustments and updates."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.policies.balloons import (
    scenario,
    test_e2e_caches,
    test_e2e_metrics,
    test_e2e_n4c16,
    test_e2e_sparse,
)
from tests.policies.balloons import test_e2e_n4c16_more as more
from tests.policies.replay.simulated import replay_simulated

REPLAYS: list[Callable[[Path], None]] = [
    test_e2e_n4c16.test01_basic_placement,
    test_e2e_metrics.test02_prometheus_metrics,
    test_e2e_n4c16.test03_reserved,
    test_e2e_n4c16.test04_groupby,
    test_e2e_n4c16.test05_namespace,
    test_e2e_n4c16.test07_maxballoons,
    test_e2e_n4c16.test08_numa,
    test_e2e_n4c16.test09_isolated,
    test_e2e_n4c16.test10_allocator_opts,
    test_e2e_n4c16.test11_match_expression,
    test_e2e_n4c16.test22_isolcpus,
    test_e2e_n4c16.test23_available_cpus,
    more.test16_composite_balloons,
    more.test30_numa_disabled,
    test_e2e_caches.test13_cacheclusters_4cpu,
    test_e2e_caches.test13_cacheclusters_2cpu,
    test_e2e_caches.test15_loadclasses,
    test_e2e_sparse.test01_sparse_4kcpus,
]


@pytest.mark.parametrize("replay", REPLAYS, ids=lambda f: f.__name__)
def test_through_the_simulated_runtime(
    replay: Callable[[Path], None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    replay_simulated(scenario, monkeypatch, replay, tmp_path)
