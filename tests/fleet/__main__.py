"""``python -m tests.fleet [--agents 50 200 ...] [--steady SECONDS] [--out DIR]``.

Runs the fleet scenarios once per fleet size, each on a fresh control plane, prints the
per-node figures and writes ``<out>/fleet-<N>.json``; exits 1 if a budget
(``tests/fleet/budgets.py``) is broken at any size.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.fleet import budgets, report
from tests.fleet.run import run_fleet

SCENARIOS = ("startup", "steady", "change", "restart")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tests.fleet", description=__doc__)
    p.add_argument("--agents", type=int, nargs="+", default=[50, 200, 500, 1000])
    p.add_argument("--processes", type=int, default=2, help="worker processes (agents split)")
    p.add_argument("--steady", type=float, default=600.0, help="steady window, seconds")
    p.add_argument("--down", type=float, default=10.0, help="API server down, seconds")
    p.add_argument("--skip", action="append", choices=SCENARIOS[1:], default=[])
    p.add_argument("--out", type=Path, default=Path("fleet-results"))
    p.add_argument("--label", default="", help="added to the file names (before, after)")
    return p.parse_args(argv)


def code_version() -> str:
    result = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True,
                            text=True, check=False)  # fmt: skip
    return result.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    # SIGTERM unwinds like Ctrl-C: the workers, etcd and the API servers are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args = parse_args(sys.argv[1:] if argv is None else argv)
    args.out.mkdir(parents=True, exist_ok=True)
    scenarios = tuple(s for s in SCENARIOS if s not in args.skip)
    results: list[dict[str, Any]] = []
    for agents in args.agents:
        with tempfile.TemporaryDirectory(prefix=f"fleet-{agents}-") as tmp:
            result = run_fleet(agents, Path(tmp), processes=args.processes,
                               steady_seconds=args.steady, down_seconds=args.down,
                               scenarios=scenarios)  # fmt: skip
        result["code"] = code_version()
        suffix = f"-{args.label}" if args.label else ""
        path = args.out / f"fleet-{agents}{suffix}.json"
        path.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {path}", file=sys.stderr)
        results.append(result)
        print(report.summary(result), flush=True)
    broken = [f"{r['agents']} agents: {v}" for r in results for v in budgets.violations(r)]
    for line in broken:
        print(f"budget broken: {line}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
