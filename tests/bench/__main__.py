"""``python -m tests.bench [--quick] [--out DIR] [--skip PART ...]``: build, measure, report."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

import trio

from tests.bench import containerd_lane, extras, report
from tests.bench.contenders import Contender
from tests.bench.gopeer import ensure_go_topology_aware
from tests.bench.nri_phases import LatencyPlan, latency_phase, sync_phase
from tests.conformance.build import GOPLUGIN, HARNESS_V012, BuildError, ensure_binary

PARTS = ("nri", "containerd", "sync", "policy", "dra", "dra-chain", "dra-grouped", "profile")
SYNC_CONTAINERS = 1000


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__)
    p.add_argument("--out", type=Path, default=Path("bench-results"), help="results directory")
    p.add_argument("--quick", action="store_true", help="fewer samples (a smoke run)")
    p.add_argument("--skip", action="append", choices=PARTS, default=[], help="leave a part out")
    return p.parse_args(argv)


def contenders() -> tuple[list[Contender], dict[str, str]]:
    """Ours with both policies, then whichever Go plugins build; a failed build is noted."""
    found = [Contender("ours", "topology-aware"), Contender("ours", "template")]
    missing: dict[str, str] = {}
    for impl, policy, build in (
        ("go", "topology-aware", ensure_go_topology_aware),
        ("gostub", "fixed-cpus", lambda: ensure_binary(GOPLUGIN)),
    ):
        name = f"{impl}/{policy}"
        try:
            found.append(Contender(impl, policy, build()))
        except BuildError as exc:
            print(f"{name}: not measured, build failed: {exc}", file=sys.stderr)
            missing[name] = str(exc).splitlines()[0]
    return found, missing


async def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"machine": report.machine(), "load_start": report.load_average()}
    harness = ensure_binary(HARNESS_V012)
    lanes, results["not_measured"] = contenders()
    plan = LatencyPlan(rounds=2, batch=50) if args.quick else LatencyPlan()
    results["plan"] = {"levels": plan.levels, "rounds": plan.rounds, "batch": plan.batch}
    workdir = Path(tempfile.mkdtemp(prefix="nri-bench-", dir="/tmp"))  # short socket paths
    try:
        if "nri" not in args.skip:
            results["nri"] = await latency_phase(lanes, harness, workdir / "nri", plan)
            report.write_json(results, args.out)  # what took longest is kept, come what may
        if "containerd" not in args.skip:
            cplan = (
                containerd_lane.Plan(rounds=2, batch=5) if args.quick else containerd_lane.Plan()
            )
            try:
                results["containerd"] = await trio.to_thread.run_sync(
                    containerd_lane.containerd_phase, lanes, cplan
                )
            except Exception as exc:  # no root or no cgroup v1 here: the other parts still run
                traceback.print_exc()
                results["containerd"] = extras.unavailable(exc)
        if "sync" not in args.skip:
            repeats = 1 if args.quick else 2
            results["sync"] = await sync_phase(
                lanes, harness, workdir / "sync", SYNC_CONTAINERS, repeats
            )
        if "policy" not in args.skip:
            results["policy"] = extras.policy_decisions()
        if "dra" not in args.skip:
            results["dra"] = await extras.dra_prepare(200 if args.quick else 2000)
        if "dra-chain" not in args.skip:
            results["dra_chain"] = await extras.dra_chain(5 if args.quick else 20)
        if "dra-grouped" not in args.skip:
            results["dra_grouped"] = await extras.dra_grouped(3 if args.quick else 20)
        if "profile" not in args.skip:
            try:
                results["profile"] = await extras.profile_create(
                    lanes[0], harness, workdir, 200 if args.quick else 1000, args.out
                )
            except Exception as exc:  # the figures measured so far still get written
                traceback.print_exc()
                results["profile"] = extras.unavailable(exc)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    results["load_end"] = report.load_average()
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        results = trio.run(run, args)
    except Exception:
        traceback.print_exc()
        return 1
    json_path = report.write_json(results, args.out)
    png = report.plot(results, args.out)
    print(report.table(results))
    print(f"\nwrote {json_path}" + (f" and {png}" if png else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
