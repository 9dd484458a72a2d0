"""The parts owned elsewhere (policy decisions, DRA) and the hot-path profile.

The policy and DRA benchmarks are imported lazily: when one is missing or fails, its rows
say so and the rest of the bench still runs.
"""

from __future__ import annotations

import importlib
import io
import pstats
import traceback
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import trio

from tests.bench.contenders import Contender, open_lane

PROFILE_LIVE = 500


def unavailable(exc: BaseException) -> dict[str, Any]:
    return {"unavailable": f"{type(exc).__name__}: {exc}".splitlines()[0][:200]}


def policy_decisions(policies: tuple[str, ...] = ("topology-aware", "balloons")) -> dict[str, Any]:
    """tests.bench_policy: one allocation decision at 500 live, Synchronize of 1,000."""
    try:
        bench_policy = importlib.import_module("tests.bench_policy").bench_policy
    except Exception as exc:
        return {name: unavailable(exc) for name in policies}
    out: dict[str, Any] = {}
    for name in policies:
        try:
            out[name] = bench_policy(name, n_live=500)
        except Exception as exc:
            traceback.print_exc()
            out[name] = unavailable(exc)
    return out


async def dra_prepare(n: int) -> dict[str, Any]:
    """tests.bench_dra: NodePrepareResources from a grpcio client, idle and under load."""
    try:
        bench_prepare: Callable[..., Awaitable[dict[str, Any]]] = importlib.import_module(
            "tests.bench_dra"
        ).bench_prepare
    except Exception as exc:
        return {"idle": unavailable(exc), "nri_load": unavailable(exc)}
    out: dict[str, Any] = {}
    for key, load in (("idle", False), ("nri_load", True)):
        try:
            out[key] = await partial(bench_prepare, n, nri_load=load)()
        except Exception as exc:
            traceback.print_exc()
            out[key] = unavailable(exc)
    return out


async def profile_create(
    contender: Contender, harness: Path, workdir: Path, samples: int, out_dir: Path
) -> dict[str, Any]:
    """Our daemon under cProfile while the harness runs ``samples`` container lifecycles
    at 500 live; the top functions by own time go to ``profile-<policy>.txt``."""
    stats_file = workdir / f"profile-{contender.policy}.pstats"
    async with open_lane(contender, harness, workdir / "profile", profile_to=stats_file) as lane:
        await lane.populate(PROFILE_LIVE)
        await lane.sample_lifecycle(samples)
    with trio.fail_after(10):  # cProfile writes its file as the daemon exits
        while not stats_file.exists():
            await trio.sleep(0.1)
    text = _top_functions(stats_file)
    report = out_dir / f"profile-{contender.policy}.txt"
    report.write_text(text)
    return {"contender": contender.name, "samples": samples, "report": str(report)}


def _top_functions(stats_file: Path, limit: int = 30) -> str:
    buf = io.StringIO()
    stats = pstats.Stats(str(stats_file), stream=buf)
    stats.strip_dirs().sort_stats("tottime").print_stats(limit)
    stats.sort_stats("cumulative").print_stats(limit)
    return buf.getvalue()
