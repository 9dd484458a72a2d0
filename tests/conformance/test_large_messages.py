"""Messages over 4096 bytes, in several mux frames, both ways through the real NRI runtime code.

The Go multiplexer reads each frame into a 4096-byte buffer, so everything we send larger
than that must be split (``nri/mux.py``); what Go sends us comes as one frame of any size.
Each test checks, from the harness's side, that the exchange carried what it should, and
that the messages really were larger than two frames' worth: a workload too small to need
the split would prove nothing about it.

Container and sandbox IDs are 64 hex characters, as containerd makes them.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import betterproto
import pytest
import trio

from nri_resmgr._gen.nri.pkg.api import v1alpha1 as api
from nri_resmgr.sim.synthetic import Layout, write_sysfs
from tests.conformance import objects
from tests.conformance.peer import Harness, pruned
from tests.conformance.test_nri_conformance import cpus, running_daemon

pytestmark = pytest.mark.integration

FRAME = 4096
PODS = 50
PER_POD = 2
# One NUMA node of 16 CPUs: every shared container is in the one shared pool, so each change
# of that pool updates all of them, and the messages grow with the workload.
ONE_NODE_16_CPUS = Layout(cores_per_node=8, threads=2)

CONFIG = """\
apiVersion: config.nri/v1alpha1
kind: TopologyAwarePolicy
metadata: {name: default}
spec: {reservedResources: {cpu: "cpuset:%d"}}
"""

JSON = dict[str, Any]


def long_id(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def pod(n: int) -> JSON:
    return {**objects.pod(n), "id": long_id(f"sandbox-{n}")}


def container(pod_obj: JSON, n: int, **kw: Any) -> JSON:
    ctr = objects.container(pod_obj, n, **kw)
    return {**ctr, "id": long_id(ctr["id"])}


def workload() -> tuple[list[JSON], list[JSON]]:
    """Running shared-pool containers (50m each, Burstable pods: 5 CPUs' worth in all)."""
    pods = [pod(n) for n in range(PODS)]
    ctrs = [
        container(p, c, state="CONTAINER_RUNNING", milli_cpu=50)
        for p in pods
        for c in range(PER_POD)
    ]
    return pods, ctrs


async def create_one_by_one(harness: Harness, pods: list[JSON], ctrs: list[JSON]) -> None:
    """Creates the workload through small CreateContainer calls, so that only the exchange a
    test is about is large (the Synchronize at connect time stays empty)."""
    for p in pods:
        await harness.relay("run-pod", pod=p)
    by_id = {p["id"]: p for p in pods}
    for c in ctrs:
        await harness.relay("create-container", pod=by_id[c["pod_sandbox_id"]], container=c)


def wire_size(message: betterproto.Message) -> int:
    """The protobuf size of a message built from the harness's JSON (a lower bound for the
    ttrpc message, which adds its envelope)."""
    return len(bytes(message))


def updates_size(updates: list[JSON]) -> int:
    return wire_size(api.UpdateContainersRequest(update=[_update(u) for u in updates]))


def _update(data: JSON) -> api.ContainerUpdate:
    return api.ContainerUpdate().from_dict(data)


@pytest.fixture
def host_root(sockdir: Path) -> Path:
    return write_sysfs(sockdir / "host", ONE_NODE_16_CPUS)


async def test_a_large_synchronize_crosses_both_ways(
    harness: Harness, sockdir: Path, host_root: Path
) -> None:
    pods, ctrs = workload()
    request = api.SynchronizeRequest(
        pods=[api.PodSandbox().from_dict(p) for p in pods],
        containers=[api.Container().from_dict(c) for c in ctrs],
    )
    await harness.sync_state(pods, ctrs)
    async with running_daemon(harness, sockdir, CONFIG % 0, "--host-root", str(host_root)):
        reply = await harness.wait_plugin(timeout=20)

    [sync] = reply["syncs"]
    assert (sync["pods"], sync["containers"], sync.get("error")) == (PODS, len(ctrs), None)
    # Every running container gets its shared cpuset, never the reserved CPU 0.
    assert sorted(u["container_id"] for u in sync["updates"]) == sorted(c["id"] for c in ctrs)
    for update in sync["updates"]:
        assert 0 not in cpus(update["linux"]["resources"]["cpu"]["cpus"])
    assert wire_size(request) > 2 * FRAME  # Go -> us
    assert updates_size(sync["updates"]) > 2 * FRAME  # us -> Go


async def test_a_large_create_container_crosses_both_ways(
    harness: Harness, sockdir: Path, host_root: Path
) -> None:
    pods, ctrs = workload()
    guaranteed = {**pod(100), "linux": {"cgroup_parent": "/kubepods/pod100"}}
    big = container(guaranteed, 1, milli_cpu=2000)
    # Annotations make the request itself large: 40 x ~120 bytes.
    big["annotations"] = {f"example.com/note-{i}": "x" * 100 for i in range(40)}
    request = api.CreateContainerRequest(
        pod=api.PodSandbox().from_dict(guaranteed), container=api.Container().from_dict(big)
    )
    async with running_daemon(harness, sockdir, CONFIG % 0, "--host-root", str(host_root)):
        await harness.wait_plugin(timeout=20)
        await create_one_by_one(harness, pods, ctrs)
        await harness.relay("run-pod", pod=guaranteed)
        created = await harness.relay("create-container", pod=guaranteed, container=big)

    exclusive = cpus(pruned(created["adjust"])["linux"]["resources"]["cpu"]["cpus"])
    assert len(exclusive) == 2 and 0 not in exclusive
    # The shared pool gave up the exclusive CPUs: every shared container is told so.
    assert sorted(u["container_id"] for u in created["update"]) == sorted(c["id"] for c in ctrs)
    for update in created["update"]:
        assert not exclusive & cpus(update["linux"]["resources"]["cpu"]["cpus"])
    assert wire_size(request) > FRAME  # Go -> us
    assert updates_size(created["update"]) > 2 * FRAME  # us -> Go


async def test_large_update_containers_cross_both_ways(
    harness: Harness, sockdir: Path, host_root: Path
) -> None:
    """Moving the reserved CPU moves every shared container: one plugin-initiated
    UpdateContainers for all of them (us -> Go); the runtime reports them all failed, with
    the full updates (Go -> us), and the daemon logs each failed container."""
    pods, ctrs = workload()
    ids = [c["id"] for c in ctrs]
    args = ("--host-root", str(host_root))
    async with running_daemon(harness, sockdir, CONFIG % 0, *args) as config_file:
        await harness.wait_plugin(timeout=20)
        await create_one_by_one(harness, pods, ctrs)
        await harness.fail_updates(ids)
        config_file.write_text(CONFIG % 1)
        [call] = await harness.updates(count=1, timeout=15)
        log = sockdir / "daemon.log"
        with trio.fail_after(20):  # a hang guard; the log lines follow the reply at once
            while not all(f"update container {i}" in log.read_text() for i in call["failed"]):
                await trio.sleep(0.05)

    assert sorted(u["container_id"] for u in call["updates"]) == sorted(ids)
    assert sorted(call["failed"]) == sorted(ids)
    # The failures came from the decoded reply, not from a call that broke (which the stub
    # also reports as every update failed, with this line).
    assert "UpdateContainers of" not in log.read_text()
    for update in call["updates"]:
        moved = cpus(update["linux"]["resources"]["cpu"]["cpus"])
        assert 0 in moved and 1 not in moved
    # The runtime's reply carries the failed updates in full, as large as the request.
    assert updates_size(call["updates"]) > 2 * FRAME
