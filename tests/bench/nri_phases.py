"""The NRI measurements: CreateContainer and StopContainer latency by live population,
the updates each reply carries, Synchronize, RSS.

Fairness on a shared machine: every contender runs at once, each behind its own harness,
and the measurement rounds rotate through them (and the ping-pong floor), a batch each, so a
burst of load from elsewhere lands on all of them instead of on whoever ran at that moment.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import attrs

from tests.bench import workload
from tests.bench.contenders import (
    Contender,
    Lane,
    Lifecycles,
    open_lane,
    rss_kib,
    state_location,
)
from tests.bench.floor import echo_peer
from tests.bench.stats import ratio, summarize_ns
from tests.conformance.peer import HarnessError

FLOOR = "floor/unix-ping-pong"
RSS_POPULATION = 1000


@attrs.frozen
class LatencyPlan:
    levels: tuple[int, ...] = (0, 100, 500)
    rounds: int = 6
    batch: int = 100


def _rotated(items: Sequence[Any], by: int) -> list[Any]:
    by %= len(items)
    return [*items[by:], *items[:by]]


OPS = ("create_container", "stop_container")
EVENTS = {"create_container": "CreateContainer", "stop_container": "StopContainer"}


async def latency_phase(
    contenders: Sequence[Contender], harness: Path, workdir: Path, plan: LatencyPlan
) -> dict[str, Any]:
    """CreateContainer and StopContainer of whole lifecycles, by live population.

    The floor's batch stands beside both calls: it is the transport's round trip, whatever
    the call."""
    raw: dict[str, dict[str, dict[str, list[int]]]] = {op: {} for op in OPS}
    per_round: dict[str, dict[str, dict[str, list[float]]]] = {op: {} for op in OPS}
    updates: dict[str, dict[str, Any]] = {}
    async with AsyncExitStack() as stack:
        lanes: list[Lane] = []
        for i, contender in enumerate(contenders):
            lanes.append(await stack.enter_async_context(
                open_lane(contender, harness, workdir / f"lane{i}")
            ))  # fmt: skip
        started = {lane.contender.name: _start_record(lane) for lane in lanes}
        for lane in lanes:
            started[lane.contender.name]["events"] = lane.ready["plugins"][0].get("event_names")
        floor = stack.enter_context(echo_peer(workdir))
        names = [*started, FLOOR]
        for level in plan.levels:
            for lane in lanes:
                await lane.populate(level)
            for op in OPS:
                raw[op][str(level)] = {name: [] for name in names}
                per_round[op][str(level)] = {name: [] for name in names}
            counts = {name: Lifecycles() for name in started}
            runners: list[Lane | None] = [*lanes, None]
            for r in range(plan.rounds):
                for runner in _rotated(runners, r):
                    if runner is None:
                        floor_batch = floor.samples(plan.batch)
                        batches = {op: (FLOOR, floor_batch) for op in OPS}
                    else:
                        name = runner.contender.name
                        got = await runner.sample_lifecycle(plan.batch)
                        counts[name].create_updates += got.create_updates
                        counts[name].stop_updates += got.stop_updates
                        batches = {
                            "create_container": (name, got.create_ns),
                            "stop_container": (name, got.stop_ns),
                        }
                    for op, (name, batch) in batches.items():
                        raw[op][str(level)][name] += batch
                        per_round[op][str(level)][name].append(statistics.median(batch) / 1000)
            updates[str(level)] = {name: _update_counts(c) for name, c in counts.items()}
        for lane in lanes:
            await lane.populate(RSS_POPULATION)
            started[lane.contender.name]["rss_kib_at_1000"] = lane.rss_kib()
        subscribed = {op: {lane.contender.name for lane in lanes if lane.subscribes(EVENTS[op])}
                      for op in OPS}  # fmt: skip
    out: dict[str, Any] = {"processes": started, "updates_per_reply": updates, "raw_ns": raw}
    for op in OPS:
        out[op] = _latency_table(raw[op], per_round[op], subscribed[op])
        out[op]["not_subscribed"] = [c.name for c in contenders if c.name not in subscribed[op]]
    return out


def _update_counts(c: Lifecycles) -> dict[str, float | int]:
    return {
        "create_mean": round(statistics.mean(c.create_updates), 1),
        "create_max": max(c.create_updates),
        "stop_mean": round(statistics.mean(c.stop_updates), 1),
        "stop_max": max(c.stop_updates),
    }


def _start_record(lane: Lane) -> dict[str, Any]:
    return {
        "start_to_registered_s": round(lane.startup_s, 3),
        "rss_kib_at_start": rss_kib(lane.pid),
        "state": state_location(lane.contender, lane.workdir),
    }


def _latency_table(
    raw: dict[str, dict[str, list[int]]],
    per_round: dict[str, dict[str, list[float]]],
    subscribed: set[str],
) -> dict[str, Any]:
    """Summaries per level, and for each of ours the ratios to every other contender that
    subscribed to the call and to the floor, overall and round by round (the pairs measured
    back to back)."""
    out: dict[str, Any] = {}
    names = [n for n in next(iter(raw.values())) if n != FLOOR]
    theirs = [n for n in names if not n.startswith("ours/") and n in subscribed] + [FLOOR]
    for level, by_name in raw.items():
        row: dict[str, Any] = {name: summarize_ns(samples) for name, samples in by_name.items()}
        rounds = per_round[level]
        for name in (n for n in names if n.startswith("ours/")):
            row[name]["vs"] = {
                other: {
                    "median": ratio(row[name]["median_us"], row[other]["median_us"]),
                    "p99": ratio(row[name]["p99_us"], row[other]["p99_us"]),
                    "median_by_round": [
                        ratio(a, b) for a, b in zip(rounds[name], rounds[other], strict=True)
                    ],
                }
                for other in theirs
            }
        out[level] = row
    return out


async def sync_phase(
    contenders: Sequence[Contender], harness: Path, workdir: Path, n: int, repeats: int
) -> dict[str, Any]:
    """Synchronize with ``n`` existing containers, timed by the harness around the call;
    contenders alternate, a fresh harness and plugin each time."""
    existing = workload.existing_state(n)
    times: dict[str, list[float]] = {c.name: [] for c in contenders}
    startup: dict[str, list[float]] = {c.name: [] for c in contenders}
    failures: dict[str, list[str]] = {}
    for rep in range(repeats):
        for contender in _rotated(contenders, rep):
            lane_dir = workdir / f"sync{rep}-{contender.impl}-{contender.policy}"
            try:
                async with open_lane(contender, harness, lane_dir, existing=existing) as lane:
                    [record] = lane.ready["syncs"]
                    if record.get("error"):
                        raise HarnessError(f"Synchronize failed: {record['error']}")
                    times[contender.name].append(record["ns"] / 1e6)
                    startup[contender.name].append(lane.startup_s)
            except HarnessError as exc:  # one contender's failure must not lose the rest
                failures.setdefault(contender.name, []).append(str(exc).splitlines()[0])
    return {
        name: {
            "containers": n,
            "sync_ms_median": round(statistics.median(ms), 1) if ms else None,
            "sync_ms_all": [round(x, 1) for x in ms],
            "start_to_synchronized_s_median": (
                round(statistics.median(startup[name]), 3) if ms else None
            ),
            "failures": failures.get(name, []),
        }
        for name, ms in times.items()
    }
