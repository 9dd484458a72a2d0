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

import attrs
import trio

from nri_resmgr.nri.afterreply import ENV as AFTER_REPLY_ENV
from nri_resmgr.nri.tailtrace import ENV
from tests.bench.contenders import Contender, Lane, open_lane
from tests.conformance.build import HARNESS_V012, ensure_binary

SLOW_NS = 1_000_000


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pct(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000


async def _open(stack: AsyncExitStack, name: str, src: Path | None, work: Path) -> Lane:
    """A lane running the code in ``src`` (None: this tree), its trace in ``work``; the
    lane ``off`` runs this tree with ``NRI_RESMGR_AFTER_REPLY=0``; ``plain`` (this tree)
    and ``base`` run untraced."""
    saved = dict(os.environ)
    if name in ("new", "off"):
        os.environ[ENV] = str(work / f"{name}.trace.jsonl")
    if name == "off":
        os.environ[AFTER_REPLY_ENV] = "0"
    if src is not None:
        os.environ["PYTHONPATH"] = str(src)
    try:
        harness = ensure_binary(HARNESS_V012)
        contender = Contender("ours", "topology-aware") if src is None else _Other(src)
        return await stack.enter_async_context(open_lane(contender, harness, work / name))
    finally:
        os.environ.clear()
        os.environ.update(saved)


@attrs.frozen
class _Other(Contender):
    """Ours, run from another source tree: with ``-m`` the working directory (this tree)
    would come first on ``sys.path``, ahead of PYTHONPATH, so the tree is put first."""

    src: Path = Path()

    def __init__(self, src: Path) -> None:
        self.__attrs_init__("ours", "topology-aware", None, src)  # type: ignore[attr-defined]

    def argv(self, socket: Path, workdir: Path) -> list[str]:
        argv = super().argv(socket, workdir)
        at = argv.index("-m")
        launch = (
            f"import sys, runpy; sys.path.insert(0, {str(self.src)!r}); "
            "sys.argv[0] = 'nri_resmgr'; runpy.run_module('nri_resmgr', run_name='__main__')"
        )
        return [*argv[:at], "-c", launch, *argv[at + 2 :]]


def _analyse(name: str, harness_ns: list[int], trace_path: Path) -> dict[str, Any]:
    head = {
        "contender": name,
        "n": len(harness_ns),
        "harness_p50_us": _pct(harness_ns, 0.5),
        "harness_p90_us": _pct(harness_ns, 0.9),
        "harness_p99_us": _pct(harness_ns, 0.99),
        "over_1ms": sum(1 for h in harness_ns if h > SLOW_NS),
    }
    if not trace_path.exists():  # a revision without the trace
        return head
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
            "sched_us_median": statistics.median(max(0, r["sched_ns"]) for r in rs) / 1000,
            "handle_us_median": statistics.median(r["handle_ns"] for r in rs) / 1000,
            "with_gc": sum(1 for r in rs if r["gc_n"]),
            "gc_gens": sorted({r["gc_gen"] for r in rs if r["gc_n"]}),
            "gc_us_total": sum(r["gc_ns"] for r in rs) / 1000,
            "wall_over_cpu_us_median": statistics.median((r["wall_ns"] - r["cpu_ns"]) for r in rs)
            / 1000,
            "preempted": sum(1 for r in rs if r["preempted"]),
            "waited": sum(1 for r in rs if r["waited"]),
            "minflt_median": statistics.median(r["minflt"] for r in rs),
            "in_daemon_slow": sum(1 for r in rs if r["wall_ns"] > SLOW_NS // 2),
        }

    blocks = [r["blocks"] for r in mine]

    return head | {
        "in_daemon_p99_us": _pct([r["wall_ns"] for r in mine], 0.99),
        "in_daemon_cpu_p99_us": _pct([r["cpu_ns"] for r in mine], 0.99),
        "slow": group(slow),
        "fast": group(fast),
        "heap_blocks_per_lifecycle": round((blocks[-1] - blocks[0]) / max(1, len(blocks) - 1), 2),
        "requests_with_gc_by_oldest_gen": {
            g: sum(1 for r in records if r["gc_n"] and r["gc_gen"] == g) for g in (0, 1, 2)
        },
        "gc_outside_requests": len(json.loads(lines[-1])["outside_gc"]),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="nri-tail-", dir="/tmp"))
    names = args.lanes.split(",")
    if "base" in names and args.base is None:
        raise SystemExit("lane base needs --base DIR")
    samples: dict[str, list[int]] = {n: [] for n in names}
    load = [Path("/proc/loadavg").read_text().strip()]
    async with AsyncExitStack() as stack:
        lanes = {}
        for name in names:
            lanes[name] = await _open(stack, name, args.base if name == "base" else None, work)
        for lane in lanes.values():
            await lane.populate(args.live)
        cpu0 = {name: _cpu_s(lane.pid) for name, lane in lanes.items()}
        for r in range(args.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                got = await lanes[name].sample_lifecycle(args.batch)
                samples[name] += got.create_ns
        cpu = {name: _cpu_s(lane.pid) - cpu0[name] for name, lane in lanes.items()}
    load.append(Path("/proc/loadavg").read_text().strip())
    out = {n: _analyse(n, samples[n], work / f"{n}.trace.jsonl") for n in names}
    for name in names:  # the daemon's whole CPU time (all threads) per sampled lifecycle
        out[name]["daemon_cpu_us_per_lifecycle"] = round(cpu[name] / len(samples[name]) * 1e6)
    return {"live": args.live, "loadavg": load, "results": out}


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m tests.bench.tail", description=__doc__)
    p.add_argument("--base", type=Path, help="source tree of the revision to compare with")
    p.add_argument("--lanes", default="new,off", help="of new, off, plain, base (comma-separated)")
    p.add_argument("--live", type=int, default=500)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--batch", type=int, default=50)
    results = trio.run(run, p.parse_args())
    json.dump(results, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
