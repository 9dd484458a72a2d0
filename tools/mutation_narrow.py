"""A copy of the project whose mutmut runs only the given tests against each mutant.

``python tools/mutation_narrow.py DEST TEST...`` copies the tracked sources, tests, tools,
protos, docs, README.md, mkdocs.yml and pyproject.toml to DEST (its ``mutants/`` is kept, so
results accumulate) and replaces ``pytest_add_cli_args_test_selection`` in the copy's
``[tool.mutmut]`` by TEST... (plus the fast-tests-only options). mutmut reads that setting
only from pyproject.toml.

Why: a mutant that survives runs every test that reached its function. The config loader
is reached by ~290 tests (every test that loads a policy), ~200 s a survivor on 2 shared
cores; its own tests (tests/config and the config tests) take seconds.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COPIED = [
    "nri_resmgr",
    "tests",
    "tools",
    "proto",
    "docs",
    "README.md",
    "mkdocs.yml",
    "pyproject.toml",
]
SELECTION = re.compile(r"^pytest_add_cli_args_test_selection = \[.*?^\]", re.M | re.S)
FAST_ONLY = ["-m", "not integration", "-p", "no:cacheprovider"]


def narrowed(pyproject: str, tests: list[str]) -> str:
    if not SELECTION.search(pyproject):
        raise SystemExit("pyproject.toml has no pytest_add_cli_args_test_selection to replace")
    # One item a line and "]" alone on the last, as in the original: a copy can be narrowed again.
    items = "".join(f"    {json.dumps(item)},\n" for item in tests + FAST_ONLY)
    block = f"pytest_add_cli_args_test_selection = [\n{items}]"
    return SELECTION.sub(lambda _: block, pyproject, count=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("dest", type=Path)
    parser.add_argument("tests", nargs="+")
    args = parser.parse_args()
    listed = subprocess.run(
        ["git", "ls-files", "-z", *COPIED], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.split("\0")
    for name in filter(None, listed):
        target = args.dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    pyproject = args.dest / "pyproject.toml"
    pyproject.write_text(narrowed(pyproject.read_text(), args.tests))
    print(f"{args.dest}: mutmut runs {' '.join(args.tests)} against each mutant")


if __name__ == "__main__":
    main()
