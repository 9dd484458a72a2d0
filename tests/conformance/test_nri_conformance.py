"""Our daemon, as a real process, against the real NRI runtime code (the Go harness).

Every test runs twice: against the latest NRI release (dedicated event RPCs) and against
v0.6.1, the NRI of containerd 1.7, which delivers most events as StateChange and rejects
event subscriptions it does not know.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from tests.conformance import objects
from tests.conformance.peer import (
    VALID_EVENT_MASKS,
    Harness,
    event_bit,
    open_harness,
    pruned,
    run_process,
)

pytestmark = pytest.mark.integration

PLUGIN_NAME = "resmgr-conformance"
PLUGIN_INDEX = "42"

TEMPLATE_CONFIG = """\
apiVersion: config.nri/v1alpha1
kind: TemplatePolicy
metadata: {name: default}
spec: {reservedResources: {cpu: 750m}}
"""

TOPOLOGY_AWARE_CONFIG = """\
apiVersion: config.nri/v1alpha1
kind: TopologyAwarePolicy
metadata: {name: default}
spec: {reservedResources: {cpu: "cpuset:%s"}}
"""


@asynccontextmanager
async def running_daemon(
    harness: Harness, workdir: Path, config: str, *extra_args: str
) -> AsyncIterator[Path]:
    """Our daemon pointed at the harness socket, with ``config`` as its config file (the
    path is yielded: rewriting it reconfigures the running daemon)."""
    config_file = workdir / "config.yaml"
    config_file.write_text(config)
    argv = [
        sys.executable,
        "-m",
        "nri_resmgr",
        "--config-file",
        str(config_file),
        "--nri-socket",
        str(harness.socket),
        "--nri-plugin-name",
        PLUGIN_NAME,
        "--nri-plugin-index",
        PLUGIN_INDEX,
        "--kubelet-plugins-dir",
        str(workdir / "kubelet-plugins"),
        "--kubelet-registry-dir",
        str(workdir / "kubelet-registry"),
        "--log-level",
        "debug",
        *extra_args,
    ]
    log_path = workdir / "daemon.log"
    try:
        async with run_process(argv, log_path):
            yield config_file
    except BaseException:
        # pytest shows a failing test's stdout: the daemon's side of the story
        print("daemon log tail:\n" + "\n".join(log_path.read_text().splitlines()[-40:]))
        raise


def cpus(cpuset: str) -> set[int]:
    out: set[int] = set()
    for part in filter(None, cpuset.split(",")):
        first, _, last = part.partition("-")
        out.update(range(int(first), int(last or first) + 1))
    return out


async def test_registers_and_subscribes_within_what_the_runtime_knows(
    harness: Harness, sockdir: Path, nri_version: str
) -> None:
    async with running_daemon(harness, sockdir, TEMPLATE_CONFIG):
        reply = await harness.wait_plugin(timeout=20)

    [plugin] = reply["plugins"]
    assert (plugin["name"], plugin["index"]) == (PLUGIN_NAME, PLUGIN_INDEX)
    # A plugin only reaches the invocation list after the runtime accepted its Configure
    # reply, so the mask below is the one our Configure answer carried.
    needed = event_bit("CreateContainer") | event_bit("RemoveContainer")
    assert plugin["events"] & needed == needed, plugin["event_names"]
    assert plugin["events"] & ~VALID_EVENT_MASKS[nri_version] == 0, plugin["event_names"]


async def test_synchronize_hands_existing_containers_to_the_plugin(
    harness: Harness, sockdir: Path
) -> None:
    pods = [objects.pod(n) for n in range(3)]
    ctrs = [objects.container(p, c, state="CONTAINER_RUNNING") for p in pods for c in range(2)]
    await harness.sync_state(pods, ctrs)
    async with running_daemon(harness, sockdir, TEMPLATE_CONFIG):
        reply = await harness.wait_plugin(timeout=20)

    # The template policy keeps every existing container as it is: no updates.
    assert [(s["pods"], s["containers"], s["updates"], s.get("error")) for s in reply["syncs"]] == [
        (3, 6, [], None)
    ]


async def test_create_container_returns_the_policy_adjustment(
    harness: Harness, sockdir: Path
) -> None:
    pod = objects.pod(1)
    ctr = objects.container(pod, 1)
    async with running_daemon(harness, sockdir, TEMPLATE_CONFIG):
        await harness.wait_plugin(timeout=20)
        await harness.relay("run-pod", pod=pod)
        created = await harness.relay("create-container", pod=pod, container=ctr)

    # The template policy changes nothing: the merged adjustment must be empty.
    assert pruned(created["adjust"]) == {}
    assert (created["update"], created["evict"]) == ([], [])


async def test_every_lifecycle_event_is_answered(
    harness: Harness, sockdir: Path, nri_version: str
) -> None:
    pod = objects.pod(1)
    ctr = objects.container(pod, 1)
    ctr_event = {"pod": pod, "container": ctr}
    bigger = {"cpu": {"shares": {"value": "1024"}}, "memory": {"limit": {"value": str(1 << 30)}}}
    async with running_daemon(harness, sockdir, TEMPLATE_CONFIG):
        await harness.wait_plugin(timeout=20)
        await harness.relay("run-pod", pod=pod)
        if nri_version != "v0.6":  # containerd 1.7 has no pod updates
            await harness.relay("update-pod", pod=pod, linux_resources=bigger)
        await harness.relay("create-container", **ctr_event)
        for op in ("post-create-container", "start-container", "post-start-container"):
            await harness.relay(op, **ctr_event)
        updated = await harness.relay("update-container", **ctr_event, linux_resources=bigger)
        await harness.relay("post-update-container", **ctr_event)
        stopped = await harness.relay("stop-container", **ctr_event)
        await harness.relay("remove-container", **ctr_event)
        await harness.relay("stop-pod", pod=pod)
        await harness.relay("remove-pod", pod=pod)
        still_there = await harness.plugins()

    # The runtime always appends the target container's own update, as the plugins left it:
    # None means no plugin changed the requested resources.
    assert (updated["update"], updated["evict"], stopped["update"]) == ([None], [], [])
    # A plugin that failed or timed out on any event would have been dropped.
    assert [p["name"] for p in still_there] == [PLUGIN_NAME]


async def test_plugin_reconnects_after_runtime_restart(harness: Harness, sockdir: Path) -> None:
    pod = objects.pod(1)
    ctr = objects.container(pod, 1)
    async with running_daemon(harness, sockdir, TEMPLATE_CONFIG):
        await harness.wait_plugin(timeout=20)
        await harness.relay("run-pod", pod=pod)
        await harness.relay("create-container", pod=pod, container=ctr)
        # What the restarted runtime knows: the container now runs.
        await harness.sync_state([pod], [{**ctr, "state": "CONTAINER_RUNNING"}])
        restarted = await harness.restart()
        reply = await harness.wait_plugin(timeout=20)
        second = objects.container(pod, 2)
        created = await harness.relay("create-container", pod=pod, container=second)

    assert restarted["closed_connections"] == 1
    assert reply["generation"] == 1
    assert [(s["pods"], s["containers"], s.get("error")) for s in reply["syncs"]] == [(1, 1, None)]
    assert [p["name"] for p in reply["plugins"]] == [PLUGIN_NAME]
    assert pruned(created["adjust"]) == {}


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two CPUs to move the reserved one")
async def test_reconfiguration_reaches_runtime_as_update_containers(
    harness: Harness, sockdir: Path
) -> None:
    """Moving the reserved CPU moves the shared pool: the topology-aware policy must tell the
    runtime through UpdateContainers, the plugin-initiated call."""
    pod = objects.pod(1)
    ctr = objects.container(pod, 1, milli_cpu=500)  # shared-pool container
    async with running_daemon(harness, sockdir, TOPOLOGY_AWARE_CONFIG % 0) as config_file:
        await harness.wait_plugin(timeout=20)
        await harness.relay("run-pod", pod=pod)
        created = await harness.relay("create-container", pod=pod, container=ctr)
        await harness.relay("start-container", pod=pod, container=ctr)
        config_file.write_text(TOPOLOGY_AWARE_CONFIG % 1)
        calls = await harness.updates(count=1, timeout=15)

    before = cpus(pruned(created["adjust"])["linux"]["resources"]["cpu"]["cpus"])
    [call] = calls
    [update] = call["updates"]
    after = cpus(update["linux"]["resources"]["cpu"]["cpus"])
    assert update["container_id"] == ctr["id"]
    assert 0 not in before and 0 in after and 1 not in after, (before, after)
    assert call["failed"] == []


async def test_plugin_reconnects_to_a_new_runtime_process(
    harness_binaries: dict[str, Path], nri_version: str, sockdir: Path
) -> None:
    """The runtime process exits and a new one listens on the same path (containerd
    restarting): the plugin keeps re-dialling and registers with the newcomer."""
    binary = harness_binaries[nri_version]
    async with (
        open_harness(binary, sockdir) as first,
        running_daemon(first, sockdir, TEMPLATE_CONFIG),
    ):
        await first.wait_plugin(timeout=20)
        await first.aclose()
        async with open_harness(binary, sockdir) as second:
            reply = await second.wait_plugin(timeout=20)
    assert [p["name"] for p in reply["plugins"]] == [PLUGIN_NAME]
