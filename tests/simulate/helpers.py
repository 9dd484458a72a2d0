"""Shared pieces of the simulate tests: data files, running simulate in-process and as a CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from nri_resmgr.config import PolicyDocument
from nri_resmgr.sim.command import load_config
from nri_resmgr.sim.machine import open_machine
from nri_resmgr.sim.records import SimulationResult
from nri_resmgr.sim.runner import simulate
from nri_resmgr.sim.workload import parse_workload
from tests.simulate.reference import Reference, run_reference

DATA = Path(__file__).parent / "data"
TOPOLOGY_AWARE = DATA / "topology-aware.yaml"
BALLOONS_VALUES = DATA / "balloons-values.yaml"
WORKLOAD = DATA / "workload.yaml"
REPO = Path(__file__).parents[2]


def config(policy: str) -> PolicyDocument:
    if policy == "balloons":
        return load_config(str(BALLOONS_VALUES), "balloons")
    return load_config(str(TOPOLOGY_AWARE))


async def run_both(
    machine: str, doc: PolicyDocument, text: str, tmp: Path
) -> tuple[SimulationResult, Reference]:
    """simulate and the oracle on the same machine, config and workload."""
    workload = parse_workload(text, "workload")
    with open_machine(machine) as m:
        result = await simulate(m, doc, workload, tmp)
        reference = run_reference(m.host_root, doc, workload)
    return result, reference


def final_placements(result: SimulationResult) -> dict[str, tuple[str, str]]:
    out = {}
    for c in result.live:
        assert c.final is not None, c.label
        out[c.label] = (c.final.cpus, c.final.mems)
    return out


def expected_placements(reference: Reference) -> dict[str, tuple[str, str]]:
    return {label: reference.cpus[label] for label in reference.running}


def run_cli(*args: str, expect: int | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "nri_resmgr", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        check=False,
    )
    if expect is not None:
        assert proc.returncode == expect, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def cli_json(*args: str, expect: int = 0) -> dict[str, Any]:
    proc = run_cli("simulate", *args, "--output", "json", expect=expect)
    data: dict[str, Any] = json.loads(proc.stdout)
    return data
