"""Hostile configuration from the cluster: the agent rejects it and keeps serving (FakeKube)."""

from __future__ import annotations

import logging

import pytest
import trio

from nri_resmgr.agent.status import MAX_STATUS_ERROR_TEXT
from tests.agent.test_agent import CRS, NODE, Fake, cpu, cr, entry_status, eventually, new_agent
from tests.agent.test_agent import start as start_agent


async def test_malformed_watch_events_do_not_end_the_agent(
    fake: Fake, nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    kube, client = fake
    kube.put(CRS, cr("default", "1"))
    agent = new_agent(client)
    manager = await start_agent(nursery, agent)
    kube.put(CRS, cr("default", "2"))
    await eventually(lambda: cpu(manager) == "2")  # the watch of default is streaming now
    with caplog.at_level(logging.INFO):
        kube.send_raw(CRS, "default", b"{not json at all\n")
        kube.send_raw(CRS, "default", b'{"type": "MODIFIED", "object": "a string"}\n')
        kube.put(CRS, cr("default", "3"))
        await eventually(lambda: cpu(manager) == "3")
    assert "event is not JSON" in caplog.text
    await eventually(lambda: entry_status(kube, "default") == ("Success", 3))


async def test_a_huge_bad_value_is_quoted_short_in_the_status_and_the_log(
    fake: Fake, nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    kube, client = fake
    kube.put(CRS, cr("default", "1"))
    manager = await start_agent(nursery, new_agent(client))
    huge = "x" * 600_000
    bad = cr("default", "1", instrumentation={"reportPeriod": huge})
    bad["spec"] |= {f"unknown{i}": i for i in range(500)}
    with caplog.at_level(logging.ERROR):
        kube.put(CRS, bad)
        await eventually(lambda: entry_status(kube, "default") == ("Failure", 2))
    entry = kube.node_status(CRS, "default", NODE)
    assert entry is not None
    assert len(entry["errors"]) <= MAX_STATUS_ERROR_TEXT
    assert "and 490 more" in entry["errors"] or "truncated" in entry["errors"]
    assert len(caplog.text) < 20_000  # a few lines, not 600 KB or 500 lines
    assert "more problems not shown" in caplog.text
    assert cpu(manager) == "1"
