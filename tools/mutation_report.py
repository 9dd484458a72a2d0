"""Kill rate per mutated module from mutmut 3's results (``mutants/**/*.py.meta``).

``python tools/mutation_report.py [--survivors]`` prints a Markdown table: module, mutants
tried, killed (a test failed, or timed out), survived, and the kill rate over the mutants
tried. Mutants not yet run (a bounded run) are counted apart, never as survivors.

``--sample N --seed S MODULE`` prints a seeded random sample of N of MODULE's mutant names
(``nri_resmgr.policies.topology_aware.engine``), one a line, for a bounded run that
someone else can repeat: ``mutmut run $(python tools/mutation_report.py --sample 160 ...)``.
The names come from the meta files ``mutmut run`` writes first, so generate them once (a
run interrupted after "Generating mutants" is enough).
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from pathlib import Path

KILLED = {1, 3, 24, -24, 36, 152}  # test failure, pytest internal error, timeouts
SURVIVED = {0}
NOT_RUN = {None}


def module_stats(meta: Path) -> tuple[Counter[str], list[str]]:
    data = json.loads(meta.read_text())
    counts: Counter[str] = Counter()
    survivors = []
    for name, code in sorted((data.get("exit_code_by_key") or {}).items()):
        if code in KILLED:
            counts["killed"] += 1
        elif code in SURVIVED:
            counts["survived"] += 1
            survivors.append(name)
        elif code in NOT_RUN:
            counts["not run"] += 1
        else:
            counts["other"] += 1  # no tests cover it, or suspicious: listed, not hidden
            survivors.append(f"{name} (exit {code})")
    return counts, survivors


def sample(root: Path, module: str, size: int, seed: int) -> list[str]:
    """``size`` of ``module``'s mutant names drawn with ``seed``, in name order."""
    meta = root / (module.replace(".", "/") + ".py.meta")
    if not meta.is_file():
        raise SystemExit(f"{meta}: no such meta file (run mutmut once to generate mutants)")
    names = sorted(json.loads(meta.read_text()).get("exit_code_by_key") or {})
    if size >= len(names):
        return names
    return sorted(random.Random(seed).sample(names, size))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--survivors", action="store_true", help="list surviving mutants")
    parser.add_argument("--root", type=Path, default=Path("mutants"))
    parser.add_argument("--sample", type=int, metavar="N", help="print N mutant names of MODULE")
    parser.add_argument("--seed", type=int, default=21, help="seed of --sample (default 21)")
    parser.add_argument("module", nargs="?", help="dotted module name, for --sample")
    args = parser.parse_args()
    if args.sample is not None:
        if not args.module:
            parser.error("--sample needs a MODULE")
        print("\n".join(sample(args.root, args.module, args.sample, args.seed)))
        return
    print("| module | tried | killed | survived | other | not run | kill rate |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    listing = []
    for meta in sorted(args.root.rglob("*.py.meta")):
        counts, survivors = module_stats(meta)
        tried = counts["killed"] + counts["survived"] + counts["other"]
        if not tried and not counts["not run"]:
            continue
        rate = f"{100 * counts['killed'] / tried:.1f} %" if tried else "n/a"
        module = str(meta.relative_to(args.root)).removesuffix(".meta")
        print(f"| `{module}` | {tried} | {counts['killed']} | {counts['survived']} | "
              f"{counts['other']} | {counts['not run']} | {rate} |")  # fmt: skip
        listing += [f"{module}: {s}" for s in survivors]
    if args.survivors:
        print("\n".join(["", "surviving:", *listing]))


if __name__ == "__main__":
    main()
