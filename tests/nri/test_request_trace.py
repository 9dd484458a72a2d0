"""The opt-in request trace (NRI_RESMGR_REQUEST_TRACE) records each request on the real
path, with the fields ``tests/bench/tail.py`` correlates."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest
import trio
import trio.testing

from nri_resmgr.nri import tailtrace
from nri_resmgr.sim.runtime import Simulator
from tests.nri.helpers import container, make_manager, pod, running_service


async def test_each_request_is_recorded_with_its_timings(
    sock_path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "trace.jsonl"
    monkeypatch.setenv(tailtrace.ENV, str(out))
    tailtrace.install_from_env()
    trace = tailtrace.TRACE
    assert trace is not None
    manager = make_manager()
    try:
        with trio.fail_after(10):
            async with (
                Simulator.listen(sock_path) as sim,
                running_service(manager, sock_path),
            ):
                await sim.wait_plugin()
                await sim.run_pod_sandbox(pod())
                await sim.create_container(pod(), container(0))
                async with trio.open_nursery() as nursery, manager.lock:
                    # The lock held (as a DRA prepare holds it): this one takes the task path.
                    nursery.start_soon(sim.start_container, pod(), container(0))
                    await trio.testing.wait_all_tasks_blocked()
                trace.begin("Collected", "inline")  # a collection inside a request counts
                gc.collect(1)
                trace.end()
    finally:
        tailtrace.uninstall()
    trace.dump()
    lines = out.read_text().splitlines()
    records = [json.loads(line) for line in lines[:-1]]
    by_method = {r["method"]: r for r in records}
    create = by_method["CreateContainer"]
    assert create["inline"] == 1 and create["gc_n"] == 0 and create["gc_gen"] == -1
    assert 0 < create["handle_ns"] <= create["wall_ns"]
    assert create["cpu_ns"] > 0 and create["blocks"] > 0
    assert by_method["StartContainer"]["inline"] == 0, "it waited for the lock in a task"
    assert by_method["Configure"]["inline"] == 1
    collected = by_method["Collected"]
    assert collected["gc_n"] == 1 and collected["gc_gen"] == 1 and collected["gc_ns"] > 0
    assert "outside_gc" in json.loads(lines[-1])
    assert tailtrace.TRACE is None
