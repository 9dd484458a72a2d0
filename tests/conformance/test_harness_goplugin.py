"""The harness itself, proven with the reference plugin built on the published Go stub.

If these fail, the conformance tests of our plugin prove nothing; if these pass and those
fail, the fault is on our side of the socket.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance import objects
from tests.conformance.peer import Harness, event_bit, pruned, run_process

pytestmark = pytest.mark.integration


def goplugin_argv(binary: Path, harness: Harness) -> list[str]:
    return [str(binary), "-socket", str(harness.socket), "-name", "goplugin", "-idx", "10"]


async def test_registration_and_create_adjustment(
    harness: Harness, goplugin_binary: Path, sockdir: Path
) -> None:
    pod = objects.pod(1)
    ctr = objects.container(pod, 1)
    async with run_process(goplugin_argv(goplugin_binary, harness), sockdir / "goplugin.log"):
        reply = await harness.wait_plugin()
        [plugin] = reply["plugins"]
        assert (plugin["name"], plugin["index"]) == ("goplugin", "10")
        assert plugin["events"] == event_bit("CreateContainer") | event_bit("PostStartContainer")

        await harness.relay("run-pod", pod=pod)
        created = await harness.relay("create-container", pod=pod, container=ctr)

    assert pruned(created["adjust"]) == {"linux": {"resources": {"cpu": {"cpus": "0-1"}}}}
    assert created["update"] == [] and created["evict"] == []
    assert created["ns"] > 0


async def test_synchronize_hands_over_existing_containers(
    harness: Harness, goplugin_binary: Path, sockdir: Path
) -> None:
    pods = [objects.pod(n) for n in range(3)]
    ctrs = [objects.container(p, 0, state="CONTAINER_RUNNING") for p in pods]
    await harness.sync_state(pods, ctrs)
    async with run_process(goplugin_argv(goplugin_binary, harness), sockdir / "goplugin.log"):
        reply = await harness.wait_plugin()
    assert [(s["pods"], s["containers"], s["updates"]) for s in reply["syncs"]] == [(3, 3, [])]


async def test_unsolicited_update_reaches_runtime(
    harness: Harness, goplugin_binary: Path, sockdir: Path
) -> None:
    pod = objects.pod(1)
    ctr = objects.container(pod, 1)
    async with run_process(goplugin_argv(goplugin_binary, harness), sockdir / "goplugin.log"):
        await harness.wait_plugin()
        await harness.relay("run-pod", pod=pod)
        await harness.relay("create-container", pod=pod, container=ctr)
        await harness.relay("post-start-container", pod=pod, container=ctr)
        [call] = await harness.updates(count=1)

    assert call["updates"] == [
        {"container_id": ctr["id"], "linux": {"resources": {"cpu": {"cpus": "0"}}}}
    ]
    assert call["failed"] == []


async def test_plugin_reconnects_after_runtime_restart(
    harness: Harness, goplugin_binary: Path, sockdir: Path
) -> None:
    pod = objects.pod(1)
    async with run_process(goplugin_argv(goplugin_binary, harness), sockdir / "goplugin.log"):
        await harness.wait_plugin()
        await harness.sync_state([pod], [objects.container(pod, 0, state="CONTAINER_RUNNING")])
        restarted = await harness.restart()
        reply = await harness.wait_plugin()
        created = await harness.relay(
            "create-container", pod=pod, container=objects.container(pod, 1)
        )

    assert restarted["closed_connections"] == 1
    assert reply["generation"] == 1
    assert [(s["pods"], s["containers"]) for s in reply["syncs"]] == [(1, 1)]
    assert pruned(created["adjust"])["linux"]["resources"]["cpu"]["cpus"] == "0-1"


async def test_bad_commands_get_clear_errors(harness: Harness) -> None:
    unknown = await harness.call_unchecked("no-such-op")
    no_pod = await harness.call_unchecked("run-pod", pod={"no_such_field": 1})
    assert (unknown["ok"], unknown["error"]) == (False, 'unknown op "no-such-op"')
    assert no_pod["ok"] is False and "field pod" in no_pod["error"]
