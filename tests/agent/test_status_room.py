"""Status at fleet scale (in-memory FakeKube): ``status.nodes`` of a shared CR stays bounded,
the results that do not fit are Events on the CR, and both phases share one pair of watches."""

from __future__ import annotations

from typing import Any

import trio

from nri_resmgr.agent.agent import ConfigAgent
from nri_resmgr.agent.report import MAX_NAME, config_event, event_name, report_attributes
from nri_resmgr.agent.status import (
    FAILURE_ROOM,
    SUCCESS_ROOM,
    StatusWriter,
    belongs_in_cr,
    failure_entry,
    success_entry,
)
from nri_resmgr.kube import KubeClient
from nri_resmgr.kube.resources import TEMPLATE_POLICIES
from tests.agent.fakekube import NODES_PATH, FakeKube
from tests.agent.test_agent import CRS, NODE, NS, cr, eventually, new_agent, node, start

Fake = tuple[FakeKube, KubeClient]


def others(count: int, status: str = "Success") -> dict[str, Any]:
    entry = {"status": status, "generation": 1, "errors": "", "timestamp": "2026-12-07T00:00:00Z"}
    return {f"other-{i}": dict(entry) for i in range(count)}


def crowded(count: int, status: str = "Success", **spec: Any) -> dict[str, Any]:
    return cr("default", **spec) | {"status": {"nodes": others(count, status)}}


def test_a_success_joins_while_there_are_fewer_successes_than_the_success_room() -> None:
    ok = success_entry(1)
    assert belongs_in_cr({"status": {"nodes": others(SUCCESS_ROOM - 1)}}, NODE, ok)
    assert not belongs_in_cr({"status": {"nodes": others(SUCCESS_ROOM)}}, NODE, ok)
    assert belongs_in_cr({}, NODE, ok)  # no status at all: room
    failures = others(SUCCESS_ROOM + 2, "Failure")
    assert belongs_in_cr({"status": {"nodes": failures}}, NODE, ok)  # failures do not count
    assert not belongs_in_cr({"status": {"nodes": others(FAILURE_ROOM, "Failure")}}, NODE, ok)


def test_a_failure_has_room_until_the_failure_room() -> None:
    bad = failure_entry(1, ["no"])
    assert belongs_in_cr({"status": {"nodes": others(FAILURE_ROOM - 1)}}, NODE, bad)
    assert not belongs_in_cr({"status": {"nodes": others(FAILURE_ROOM)}}, NODE, bad)


def test_an_entry_already_there_is_updated_or_removed_in_place() -> None:
    full = {"status": {"nodes": others(FAILURE_ROOM) | {NODE: success_entry(1)}}}
    assert belongs_in_cr(full, NODE, success_entry(2))
    assert belongs_in_cr(full, NODE, None)
    assert not belongs_in_cr({"status": {"nodes": others(3)}}, NODE, None)  # nothing to remove


def test_the_nrt_attributes_say_which_cr_generation_and_outcome() -> None:
    ok = report_attributes(TEMPLATE_POLICIES, NS, "group.a", success_entry(3))
    assert ok == [
        ("nri-resmgr.io/config", f"TemplatePolicy {NS}/group.a"),
        ("nri-resmgr.io/config-generation", "3"),
        ("nri-resmgr.io/config-status", "Success"),
    ]
    bad = report_attributes(TEMPLATE_POLICIES, NS, "default", failure_entry(4, ["x: bad"]))
    assert bad[2:] == [("nri-resmgr.io/config-status", "Failure"),
                       ("nri-resmgr.io/config-errors", "x: bad")]  # fmt: skip


def test_event_names_are_stable_names_within_the_limit() -> None:
    assert event_name("group.a", "node-1", 3, "0123456789") == "group.a.node-1.g3.01234567"
    assert event_name("default", "n", 1, "") == "default.n.g1"
    long = event_name("group." + "a" * 200, "n" * 200, 7, "u" * 36)
    assert len(long) <= MAX_NAME
    assert long == event_name("group." + "a" * 200, "n" * 200, 7, "u" * 36)
    assert long != event_name("group." + "a" * 200, "n" * 200, 8, "u" * 36)


def test_an_event_names_the_cr_the_node_and_what_happened() -> None:
    obj = {"metadata": {"name": "default", "uid": "u-1"}}
    bad = config_event(TEMPLATE_POLICIES, NS, "default", obj, NODE, failure_entry(4, ["x: bad"]))
    assert bad["involvedObject"] == {"apiVersion": "config.nri/v1alpha1", "kind": "TemplatePolicy",
                                     "name": "default", "namespace": NS, "uid": "u-1"}  # fmt: skip
    assert (bad["type"], bad["reason"]) == ("Warning", "ConfigRejected")
    what = f"TemplatePolicy {NS}/default generation 4"
    assert bad["message"] == f"node {NODE}: {what} rejected: x: bad"
    assert bad["metadata"] == {"name": f"default.{NODE}.g4.u-1", "namespace": NS}
    assert (bad["source"], bad["reportingInstance"]) == ({"component": "nri-resmgr", "host": NODE},
                                                         NODE)  # fmt: skip
    ok = config_event(TEMPLATE_POLICIES, NS, "default", obj, NODE, success_entry(4))
    assert (ok["type"], ok["reason"]) == ("Normal", "ConfigApplied")
    assert ok["message"].endswith("generation 4 applied")


async def run_agent(
    fake: Fake, nursery: trio.Nursery, crowd: dict[str, Any] | None = None
) -> ConfigAgent:
    """The agent started on a node without labels; ``crowd``: the default CR to put first."""
    kube, client = fake
    kube.put(NODES_PATH, node())
    if crowd is not None:
        kube.put(CRS, crowd)
    agent = new_agent(client)
    await start(nursery, agent)
    return agent


async def test_with_the_success_room_taken_a_success_is_an_event(
    fake: Fake, nursery: trio.Nursery
) -> None:
    kube, _ = fake
    agent = await run_agent(fake, nursery, crowded(SUCCESS_ROOM))
    await eventually(lambda: len(kube.events) == 1)
    [event] = kube.events
    assert (event["reason"], event["involvedObject"]["name"]) == ("ConfigApplied", "default")
    assert kube.node_status(CRS, "default", NODE) is None
    assert kube.status_patches == []
    await eventually(lambda: agent.events.created == 1)


async def test_a_failure_still_finds_room_after_the_successes_took_theirs(
    fake: Fake, nursery: trio.Nursery
) -> None:
    kube, _ = fake
    agent = await run_agent(fake, nursery, crowded(SUCCESS_ROOM))
    await eventually(lambda: len(kube.events) == 1)
    kube.put(CRS, crowded(SUCCESS_ROOM, cpu="not-a-quantity"))
    await eventually(lambda: kube.node_status(CRS, "default", NODE) is not None)
    entry = kube.node_status(CRS, "default", NODE)
    assert entry is not None and (entry["status"], entry["generation"]) == ("Failure", 2)
    assert len(kube.events) == 1
    assert agent.rejected == 1


async def test_with_every_place_taken_a_failure_is_a_warning_event(
    fake: Fake, nursery: trio.Nursery
) -> None:
    kube, _ = fake
    agent = await run_agent(fake, nursery, crowded(FAILURE_ROOM))
    await eventually(lambda: len(kube.events) == 1)
    kube.put(CRS, crowded(FAILURE_ROOM, cpu="not-a-quantity"))
    await eventually(lambda: len(kube.events) == 2)
    assert [e["reason"] for e in kube.events] == ["ConfigApplied", "ConfigRejected"]
    assert "generation 2 rejected" in kube.events[1]["message"]
    assert kube.status_patches == []
    await agent.stop()
    assert kube.status_patches == []  # nothing of ours to remove


async def test_a_node_with_an_entry_keeps_updating_it_in_a_full_cr(
    fake: Fake, nursery: trio.Nursery
) -> None:
    kube, _ = fake
    full = crowded(FAILURE_ROOM)
    full["status"]["nodes"][NODE] = success_entry(1)
    agent = await run_agent(fake, nursery, full)
    await eventually(lambda: agent.status.writes > 0)
    kube.put(CRS, crowded(FAILURE_ROOM, cpu="2") | {"status": kube.get(CRS, "default")["status"]})
    await eventually(lambda: (kube.node_status(CRS, "default", NODE) or {}).get("generation") == 2)
    assert kube.events == []
    await agent.stop()
    assert kube.node_status(CRS, "default", NODE) is None  # removed on a clean stop


async def test_a_place_the_crd_refuses_is_reported_as_an_event(
    fake: Fake, nursery: trio.Nursery
) -> None:
    # Other nodes took the last places between this node's look and its write.
    kube, _ = fake
    kube.max_status_entries = 3
    await run_agent(fake, nursery, crowded(3))
    await eventually(lambda: len(kube.events) == 1)
    assert len(kube.status_patches) == 1  # tried once, refused, not retried
    assert kube.node_status(CRS, "default", NODE) is None


async def test_following_makes_both_phases_share_one_pair_of_watches(
    fake: Fake, nursery: trio.Nursery
) -> None:
    kube, client = fake
    kube.put(NODES_PATH, node())
    kube.put(CRS, cr("default"))
    agent = new_agent(client)
    done = trio.Event()

    async def daemon() -> None:
        async with agent.following():
            await start(nursery, agent)
            await done.wait()

    nursery.start_soon(daemon)
    await eventually(lambda: kube.node_status(CRS, "default", NODE) is not None)
    kube.put(CRS, cr("default", cpu="2"))
    await eventually(lambda: (kube.node_status(CRS, "default", NODE) or {}).get("generation") == 2)
    collections = sorted(w["collection"] for w in kube.watch_requests)
    assert collections == [NODES_PATH, CRS]  # one each, for both phases
    assert all(w["sendInitialEvents"] == "true" for w in kube.watch_requests)
    assert "fieldSelector" not in next(w for w in kube.watch_requests if w["collection"] == CRS)
    done.set()


async def test_without_following_each_phase_opens_its_own_watches(
    fake: Fake, nursery: trio.Nursery
) -> None:
    kube, client = fake
    kube.put(NODES_PATH, node())
    kube.put(CRS, cr("default"))
    await start(nursery, new_agent(client))
    await eventually(lambda: len(kube.watch_requests) == 4)
    assert sorted(w["collection"] for w in kube.watch_requests) == [NODES_PATH] * 2 + [CRS] * 2


async def test_a_fleet_starting_at_once_spreads_its_claims_and_stays_out_of_a_full_map(
    autojump_clock: trio.abc.Clock, nursery: trio.Nursery
) -> None:
    # Forty nodes see the same empty map at once. Each waits up to PLACE_SPREAD seconds and
    # looks again (at the map its watch shows, here the one shared dict): after the first
    # SUCCESS_ROOM writes the others see it full and report only in their own place.
    entries: dict[str, Any] = {}
    patched: list[str] = []
    reported: list[tuple[str, bool]] = []

    class Api:
        async def patch(self, _resource: Any, _name: str, patch: Any, *_: Any, **__: Any) -> Any:
            node, entry = next(iter(patch["status"]["nodes"].items()))
            patched.append(node)
            await trio.sleep(0.05)  # the write, then its watch event reaches every node
            entries[node] = entry
            return {}

    def current(_name: str) -> dict[str, Any]:
        return {"metadata": {"name": "default"}, "status": {"nodes": dict(entries)}}

    writers = []
    for i in range(40):

        async def report(name: str, cr: Any, entry: Any, in_cr: bool, node: str = f"n{i}") -> None:
            reported.append((node, in_cr))

        writer = StatusWriter(Api(), TEMPLATE_POLICIES, NS, f"n{i}", current=current,  # type: ignore[arg-type]
                              report=report)  # fmt: skip
        writer.set("default", success_entry(1))
        writers.append(writer)
    async with trio.open_nursery() as writes:
        for writer in writers:
            writes.start_soon(writer.flush)
    assert len(reported) == 40  # every node reported in its own place
    assert SUCCESS_ROOM <= len(patched) < 16  # a few raced for the last places, not forty
    assert sum(in_cr for _, in_cr in reported) == len(entries)
