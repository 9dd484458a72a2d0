"""Synchronize's log: one INFO line for the containers it re-allocates, each one at debug
(a line per container was a good part of a Synchronize of 1,000)."""

from __future__ import annotations

import logging
from pathlib import Path

import attrs
import pytest

from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from nri_resmgr.resmgr.model import ContainerState
from tests.policies.workload import besteffort, start, topology_spec
from tests.sysfs.fakesys import TOPOLOGIES

RESTORE = "nri_resmgr.policies.topology_aware.restore"


def test_one_info_line_for_all_re_allocated_containers_and_each_at_debug(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    policy = start(TopologyAwarePolicy(), tmp_path, TOPOLOGIES[sorted(TOPOLOGIES)[0]],
                   topology_spec())  # fmt: skip
    pairs = [besteffort(f"be{i}") for i in range(20)]
    pods = [p for p, _ in pairs]
    # Running, without the cpuset a runtime would report: nothing to keep, all re-allocated.
    ctrs = [attrs.evolve(c, state=ContainerState.RUNNING) for _, c in pairs]
    with caplog.at_level(logging.DEBUG, logger=RESTORE):
        updates = policy.synchronize(pods, ctrs)
    assert {u.container_id for u in updates} == {c.id for c in ctrs}
    mine = [r for r in caplog.records if r.name == RESTORE]
    info = [r.getMessage() for r in mine if r.levelno == logging.INFO]
    assert info == ["re-allocating 20 containers: 20 had no cpuset, 0 one that cannot be kept"]
    debug = [r.getMessage() for r in mine if r.levelno == logging.DEBUG]
    assert len(debug) == 20
    assert all("cannot be kept; re-allocating" in line for line in debug)
