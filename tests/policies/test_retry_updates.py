"""``Policy.retry_updates``: after ``updates_failed`` a policy owes the container what it
wants for it now, once; nothing while the runtime is believed to hold it, nothing once the
container is gone (the manager's retry, ``nri_resmgr.resmgr.retry``, relies on both)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from nri_resmgr.policies.balloons import BalloonsPolicy
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from nri_resmgr.resmgr.policy import Policy
from tests.policies.workload import Runtime, balloons_spec, besteffort, start, topology_spec
from tests.sysfs.fakesys import ONE_SOCKET_4CPU


def topology_aware(root: Path) -> Policy:
    return start(TopologyAwarePolicy(), root, ONE_SOCKET_4CPU, topology_spec("cpuset:0"))


def balloons(root: Path) -> Policy:
    return start(BalloonsPolicy(), root, ONE_SOCKET_4CPU, balloons_spec("1"))


@pytest.mark.parametrize("make", [topology_aware, balloons], ids=["topology-aware", "balloons"])
def test_a_failed_container_is_owed_its_current_cpuset_once_and_nothing_once_removed(
    tmp_path: Path, make: Callable[[Path], Policy]
) -> None:
    p = make(tmp_path)
    rt = Runtime(p)
    c = rt.create(besteffort("be"))
    assert p.retry_updates([c.id]) == []  # the runtime has what the policy wants
    p.updates_failed([c.id])
    again = p.retry_updates([c.id])
    assert [(u.container_id, u.adjustment.cpuset_cpus) for u in again] == [(c.id, rt.cpus[c.id])]
    assert p.retry_updates([c.id]) == []  # recorded as sent
    p.updates_failed([c.id])
    rt.remove(c)
    assert p.retry_updates([c.id]) == []
