"""Topology-aware placement end to end: the real NRI runtime code receives our cpusets.

The daemon runs with ``--host-root`` on a synthetic two-socket machine (2 packages x 2 NUMA
nodes x 2 cores x 2 threads), so the expected CPUs do not depend on the test machine.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_resmgr.policies.oomscore import burstable_oom_score_adj
from nri_resmgr.sim.synthetic import N4C16, write_sysfs
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


async def test_a_burstable_memory_limit_no_node_holds_gets_a_socket_by_its_oom_score_adj(
    harness: Harness, sockdir: Path
) -> None:
    """The request kubelet encodes in oom_score_adj crosses the real NRI code: a Burstable
    container asking 100M with a 2.5G limit (a node holds 2 GiB) gets a socket's CPUs and
    memory; the same container without oom_score_adj (its request unknown, so its limit is
    what it needs) stays on one node's CPUs, its memory widened to two nodes."""
    root = write_sysfs(sockdir / "host", N4C16)
    adj = burstable_oom_score_adj(100 * 1000 * 1000, 4 * N4C16.node_memory)
    pod = objects.pod(1)  # Burstable
    with_adj, without = (objects.container(pod, n, milli_cpu=1000) for n in (1, 2))
    for c in (with_adj, without):
        c["linux"]["resources"]["cpu"]["quota"] = {"value": "200000"}  # a 2-CPU limit
        c["linux"]["resources"]["memory"]["limit"] = {"value": str(2500 * 1000 * 1000)}
    with_adj["linux"]["oom_score_adj"] = {"value": str(adj)}
    async with running_daemon(harness, sockdir, CONFIG, "--host-root", str(root)):
        await harness.wait_plugin(timeout=20)
        await harness.relay("run-pod", pod=pod)
        replies = [
            (await harness.relay("create-container", pod=pod, container=c))["adjust"]["linux"][
                "resources"
            ]["cpu"]
            for c in (with_adj, without)
        ]
    (socket_cpus, socket_mems), (node_cpus, node_mems) = (
        (cpus(r["cpus"]), cpus(r["mems"])) for r in replies
    )
    # A socket: two nodes (socket 1, socket 0 holding the reserved CPU), CPUs and memory.
    assert {c // 4 for c in socket_cpus} == socket_mems and len(socket_mems) == 2, replies[0]
    assert len({c // 4 for c in node_cpus}) == 1 and len(node_mems) == 2, replies[1]


async def test_a_device_node_steers_placement_by_its_sysfs_topology(
    harness: Harness, sockdir: Path
) -> None:
    """A container's linux.devices cross the real NRI code with their cgroup rules: a
    writable char device whose sysfs entry (under --host-root) sits on NUMA node 3 puts a
    1-CPU Guaranteed container there (nri-plugins' device topology hints), where without a
    hint it would go to node 2 (idle too, lower id); the same device read-only gives no
    hint."""
    root = write_sysfs(sockdir / "host", N4C16)
    dev = root / "sys/devices/pci0000:00/0000:00:03.0"
    dev.mkdir(parents=True)
    (dev / "numa_node").write_text("3\n")
    (dev / "local_cpulist").write_text("12-15\n")
    (root / "sys/dev/char").mkdir(parents=True)
    (root / "sys/dev/char/240:0").symlink_to(dev)
    pod = {**objects.pod(1), "linux": {"cgroup_parent": "/kubepods/pod1"}}  # Guaranteed
    made = []
    for n, access in ((1, "r"), (2, "rwm")):
        c = objects.container(pod, n, milli_cpu=1000)
        c["linux"]["devices"] = [{"path": "/dev/nvme0", "type": "c", "major": "240",
                                  "minor": "0"}]  # fmt: skip
        c["linux"]["resources"]["devices"] = [
            {"allow": True, "type": "c", "major": {"value": "240"}, "minor": {"value": "0"},
             "access": access}
        ]  # fmt: skip
        made.append(c)
    async with running_daemon(harness, sockdir, CONFIG, "--host-root", str(root)):
        await harness.wait_plugin(timeout=20)
        await harness.relay("run-pod", pod=pod)
        replies = [
            (await harness.relay("create-container", pod=pod, container=c))["adjust"]["linux"][
                "resources"
            ]["cpu"]
            for c in made
        ]
    (ro_cpus, ro_mems), (rw_cpus, rw_mems) = ((cpus(r["cpus"]), r["mems"]) for r in replies)
    assert rw_cpus <= {12, 13, 14, 15} and rw_mems == "3", replies[1]
    assert not ro_cpus <= {12, 13, 14, 15} and ro_mems != "3", replies[0]
