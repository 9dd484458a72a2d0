"""Whole idle CPU clusters on hybrid machines (nri-plugins ``pkg/cpuallocator``
takeIdleClusters, ``pkg/sysfs`` logical clusters); ``test_go_parity`` checks the same
machines against the Go allocator itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_resmgr.cpus import Priority, allocate_cpus, topology_of
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.sysfs import System, discover
from tests.cpuallocator.machines import MACHINES


def _machine(root: Path, name: str) -> System:
    return discover(str(next(m for m in MACHINES if m.name == name).write(root)))


def test_one_thread_clusters_merge_into_one_logical_cluster_per_die(tmp_path: Path) -> None:
    clusters = topology_of(_machine(tmp_path, "hybrid-clusters")).clusters
    assert [(c.id, str(c.cpus), c.kind.name) for c in clusters] == [
        (0, "0-7", "PERFORMANCE"),
        (8, "8-11", "EFFICIENT"),
        (12, "12-15", "EFFICIENT"),
    ]


def test_no_clusters_without_core_kinds(tmp_path: Path) -> None:
    assert topology_of(_machine(tmp_path, "n4c16")).clusters == ()


@pytest.mark.parametrize(
    ("machine", "taken", "count", "prio", "expected"),
    [
        ("hybrid-clusters", "", 4, Priority.LOW, "8-11"),  # the first of two E-modules
        ("hybrid-clusters", "9", 4, Priority.LOW, "12-15"),  # the other one is not idle
        ("hybrid-clusters", "", 8, Priority.LOW, "8-15"),  # both modules
        ("hybrid-clusters", "", 8, Priority.NORMAL, "0-7"),  # the P-cores' logical cluster
        ("hybrid-clusters", "", 8, Priority.NONE, "0-7"),  # no preference: P-clusters too
        # Package 0 has modules 4-7 (one CPU busy) and 8-11, package 1 16-19 and 20-23.
        ("hybrid-clusters-2pkg", "4", 4, Priority.LOW, "8-11"),  # an idle module, not 5-8
        ("hybrid-clusters-2pkg", "4", 8, Priority.LOW, "16-23"),  # the die holding 8 alone
    ],
)
def test_requests_take_whole_idle_clusters_of_their_kind(
    tmp_path: Path, machine: str, taken: str, count: int, prio: Priority, expected: str
) -> None:
    system = _machine(tmp_path, machine)
    free = system.online - CpuSet.parse(taken)
    assert str(allocate_cpus(system, free, count, prio)) == expected
