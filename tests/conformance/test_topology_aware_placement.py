"""Topology-aware placement end to end: the real NRI runtime code receives our cpusets.

The daemon runs with ``--host-root`` on a synthetic two-socket machine (2 packages x 2 NUMA
nodes x 2 cores x 2 threads), so the expected CPUs do not depend on the test machine.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_resmgr.sysfs.synthetic import N4C16, write_sysfs
from tests.conformance import objects
from tests.conformance.peer import Harness
from tests.conformance.test_nri_conformance import cpus, running_daemon

pytestmark = pytest.mark.integration

CONFIG = """\
apiVersion: config.nri/v1alpha1
kind: TopologyAwarePolicy
metadata: {name: default}
spec: {reservedResources: {cpu: "cpuset:0"}}
"""


async def test_create_container_replies_carry_topology_aware_placement(
    harness: Harness, sockdir: Path
) -> None:
    root = write_sysfs(sockdir / "host", N4C16)
    pod = {**objects.pod(1), "linux": {"cgroup_parent": "/kubepods/pod1"}}  # Guaranteed
    big = objects.container(pod, 1, milli_cpu=2000)
    small = objects.container(pod, 2, milli_cpu=1000)
    async with running_daemon(harness, sockdir, CONFIG, "--host-root", str(root)):
        await harness.wait_plugin(timeout=20)
        await harness.relay("run-pod", pod=pod)
        first = await harness.relay("create-container", pod=pod, container=big)
        second = await harness.relay("create-container", pod=pod, container=small)

    first_cpus = cpus(first["adjust"]["linux"]["resources"]["cpu"]["cpus"])
    second_cpus = cpus(second["adjust"]["linux"]["resources"]["cpu"]["cpus"])
    # Exclusive, whole CPUs: 2 and 1 of them, disjoint, never the reserved CPU 0.
    assert (len(first_cpus), len(second_cpus)) == (2, 1)
    assert not first_cpus & second_cpus
    assert 0 not in first_cpus | second_cpus
    # Each container's memory is pinned to the NUMA node that holds its CPUs (4 CPUs a node).
    for reply, got in ((first, first_cpus), (second, second_cpus)):
        mems = reply["adjust"]["linux"]["resources"]["cpu"]["mems"]
        assert {c // 4 for c in got} == {int(mems)}
