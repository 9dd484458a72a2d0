"""``python -m tests.bench.tail [--base DIR] [--live N] [--rounds R] [--batch B]``: where the
CreateContainer tail of ours comes from.

Runs ours/topology-aware behind the Go harness with the daemon's request trace on
(``nri_resmgr.nri.tailtrace``), populates ``--live`` containers, samples whole lifecycles
and matches each timed CreateContainer (harness ns, Go side) with the daemon's own record of
it: in-process wall and CPU time, garbage collections inside, log handler time, scheduling
delay. With ``--base DIR`` (a source tree of another revision, e.g. ``git archive main``)
a second lane runs that code, and the rounds alternate between the two, so that before and
after are measured in one run on the same (loaded) machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import trio

from nri_resmgr.nri.tailtrace import ENV
from tests.bench.contenders import Contender, Lane, open_lane
from tests.conformance.build import HARNESS_V012, ensure_binary

SLOW_NS = 1_000_000


def _pct(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000


async def _open(stack: AsyncExitStack, name: str, src: Path | None, work: Path) -> Lane:
    """A lane running the code in ``src`` (None: this tree), its trace in ``work``."""
    saved = dict(os.environ)
    os.environ[ENV] = str(work / f"{name}.trace.jsonl")
    if src is not None:
        os.environ["PYTHONPATH"] = str(src)
    try:
        harness = ensure_binary(HARNESS_V012)
        return await stack.enter_async_context(
            open_lane(Contender("ours", "topology-aware"), harness, work / name)
        )
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _analyse(name: str, harness_ns: list[int], trace_path: Path) -> dict[str, Any]:
    lines = trace_path.read_text().splitlines()
    records = [json.loads(line) for line in lines[:-1]]
    creates = [r for r in records if r["method"] == "CreateContainer"]
    mine = creates[-len(harness_ns) :]
    slow = [(h, r) for h, r in zip(harness_ns, mine, strict=True) if h > SLOW_NS]
    fast = [(h, r) for h, r in zip(harness_ns, mine, strict=True) if h <= SLOW_NS]

    def group(pairs: list[tuple[int, dict[str, Any]]]) -> dict[str, Any]:
        if not pairs:
            return {"n": 0}
        rs = [r for _, r in pairs]
        return {
            "n": len(pairs),
            "harness_us_median": statistics.median(h for h, _ in pairs) / 1000,
            "in_daemon_wall_us_median": statistics.median(r["wall_ns"] for r in rs) / 1000,
            "in_daemon_cpu_us_median": statistics.median(r["cpu_ns"] for r in rs) / 1000,
            "log_us_median": statistics.median(r["log_ns"] for r in rs) / 1000,
            "sched_us_median": statistics.median(r["sched_ns"] or 0 for r in rs) / 1000,
            "with_gc": sum(1 for r in rs if r["gc"]),
            "gc_gens": sorted({g["gen"] for r in rs for g in r["gc"]}),
            "gc_us_total": sum(g["ns"] for r in rs for g in r["gc"]) / 1000,
            "wall_over_cpu_us_median": statistics.median(
                (r["wall_ns"] - r["cpu_ns"]) for r in rs
            )
            / 1000,
            "preempted": sum(1 for r in rs if r["preempted"]),
            "waited": sum(1 for r in rs if r["waited"]),
            "minflt_median": statistics.median(r["minflt"] for r in rs),
            "in_daemon_slow": sum(1 for r in rs if r["wall_ns"] > SLOW_NS // 2),
        }

    blocks = [r["blocks"] for r in mine]
    all_gc = [g for r in records for g in r["gc"]]
    return {
        "contender": name,
        "n": len(harness_ns),
        "harness_p50_us": _pct(harness_ns, 0.5),
        "harness_p99_us": _pct(harness_ns, 0.99),
        "in_daemon_p99_us": _pct([r["wall_ns"] for r in mine], 0.99),
        "in_daemon_cpu_p99_us": _pct([r["cpu_ns"] for r in mine], 0.99),
        "slow": group(slow),
        "fast": group(fast),
        "heap_blocks_per_lifecycle": round((blocks[-1] - blocks[0]) / max(1, len(blocks) - 1), 2),
        "gc_in_requests_by_gen": {g: sum(1 for e in all_gc if e["gen"] == g) for g in (0, 1, 2)},
        "gc_outside_requests": len(json.loads(lines[-1])["outside_gc"]),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="nri-tail-", dir="/tmp"))
    names = ["new"] + (["base"] if args.base else [])
    samples: dict[str, list[int]] = {n: [] for n in names}
    load = [Path("/proc/loadavg").read_text().strip()]
    async with AsyncExitStack() as stack:
        lanes = {"new": await _open(stack, "new", None, work)}
        if args.base:
            lanes["base"] = await _open(stack, "base", args.base, work)
        for lane in lanes.values():
            await lane.populate(args.live)
        for r in range(args.rounds):
            order = names if r % 2 == 0 else names[::-1]
            for name in order:
                got = await lanes[name].sample_lifecycle(args.batch)
                samples[name] += got.create_ns
    load.append(Path("/proc/loadavg").read_text().strip())
    out = {n: _analyse(n, samples[n], work / f"{n}.trace.jsonl") for n in names}
    return {"live": args.live, "loadavg": load, "results": out}


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m tests.bench.tail", description=__doc__)
    p.add_argument("--base", type=Path, help="source tree of the revision to compare with")
    p.add_argument("--live", type=int, default=500)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--batch", type=int, default=50)
    results = trio.run(run, p.parse_args())
    json.dump(results, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
