"""Runtime restart with the real NRI runtime code (the Go harness on containerd/nri): the
daemon process, topology-aware on a synthetic machine, re-registers with the restarted
runtime, takes its Synchronize as the truth, and neither loses nor doubles an allocation.

"Not lost" is shown by what comes next: a new container gets CPUs disjoint from the restored
ones, which only holds if the restored containers' CPUs are still booked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

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


def placed(reply: dict[str, Any]) -> tuple[str, str]:
    cpu = reply["adjust"]["linux"]["resources"]["cpu"]
    return cpu["cpus"], cpu["mems"]


def running_with(ctr: dict[str, Any], cpuset: tuple[str, str]) -> dict[str, Any]:
    """``ctr`` as the restarted runtime reports it: running, with the cpuset it was given."""
    resources = ctr["linux"]["resources"]
    cpu = {**resources["cpu"], "cpus": cpuset[0], "mems": cpuset[1]}
    linux = {**ctr["linux"], "resources": {**resources, "cpu": cpu}}
    return {**ctr, "state": "CONTAINER_RUNNING", "linux": linux}


async def test_restarted_runtime_gets_the_same_placements_back(
    harness: Harness, sockdir: Path
) -> None:
    root = write_sysfs(sockdir / "host", N4C16)
    pod = {**objects.pod(1), "linux": {"cgroup_parent": "/kubepods/pod1"}}  # Guaranteed
    ctrs = [objects.container(pod, n, milli_cpu=m) for n, m in ((1, 2000), (2, 1000), (3, 1000))]
    newcomer = objects.container(pod, 4, milli_cpu=2000)
    async with running_daemon(harness, sockdir, CONFIG, "--host-root", str(root)):
        await harness.wait_plugin(timeout=20)
        await harness.relay("run-pod", pod=pod)
        given = [
            placed(await harness.relay("create-container", pod=pod, container=c)) for c in ctrs
        ]
        await harness.sync_state(
            [pod], [running_with(c, g) for c, g in zip(ctrs, given, strict=True)]
        )
        restarted = await harness.restart()
        reply = await harness.wait_plugin(timeout=20)
        later = placed(await harness.relay("create-container", pod=pod, container=newcomer))

    assert restarted["closed_connections"] == 1
    [sync] = reply["syncs"]
    assert (sync["pods"], sync["containers"], sync.get("error")) == (1, 3, None)
    # Every restored container keeps its exclusive CPUs: nothing to update.
    assert sync["updates"] in (None, [])
    held = [cpus(g[0]) for g in given]
    assert sum(len(h) for h in held) == len(set().union(*held)) == 4  # disjoint, 2+1+1
    new = cpus(later[0])
    assert len(new) == 2 and not new & set().union(*held) and 0 not in new
