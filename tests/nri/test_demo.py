"""``nri-resmgr demo``: the workload really goes simulator → NRI wire → manager → policy."""

from __future__ import annotations

import subprocess
import sys

from nri_resmgr.sim.demo import run_demo
from tests.cpulist import cpu_list


def table(text: str) -> dict[str, list[str]]:
    rows = [line.split() for line in text.splitlines()[2:]]
    return {row[0]: row[1:] for row in rows}


async def test_topology_aware_on_two_sockets_places_through_nri() -> None:
    rows = table(await run_demo("topology-aware", "n4c16"))
    # qos, mCPU, cpus at create, cpus now, mems
    assert rows["kube-system/coredns"] == ["burstable", "100", "0", "0", "0-3"]
    assert rows["default/db"] == ["guaranteed", "2000", "4-5", "4-5", "1"]
    assert rows["default/cache"] == ["guaranteed", "1000", "12", "12", "3"]
    exclusive = cpu_list(rows["default/db"][3]) | cpu_list(rows["default/cache"][3])
    assert exclusive == {4, 5, 12}
    for name in ("default/batch", "default/api"):
        shared = cpu_list(rows[name][3])
        assert shared, name
        assert not exclusive & shared, name


def test_cpu_list_counts_the_cpus_inside_a_range() -> None:
    # "0-15" holds the exclusive CPUs 4, 5 and 12; splitting on "-" would see only 0 and 15.
    assert cpu_list("0-15") & {4, 5, 12} == {4, 5, 12}
    assert cpu_list("1-3,12") == {1, 2, 3, 12}


async def test_template_changes_nothing() -> None:
    rows = table(await run_demo("template", "n4c16"))
    assert {r[2] for r in rows.values()} == {"(unchanged)"}


def test_demo_command_runs() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "nri_resmgr", "demo", "--policy", "balloons"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "policy balloons on n4c16" in out.stdout
    assert len(table(out.stdout)) == 7
