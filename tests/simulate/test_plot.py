"""The placement picture: produced as PNG and SVG, and a clear refusal without matplotlib."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from nri_resmgr.sim.machine import open_machine
from nri_resmgr.sim.plot import PlotError, plot, require_matplotlib
from nri_resmgr.sim.runner import simulate
from nri_resmgr.sim.workload import parse_workload
from tests.peers import in_ci
from tests.simulate.helpers import TOPOLOGY_AWARE, WORKLOAD, config, run_cli


@pytest.fixture(autouse=True)
def _matplotlib() -> None:
    """matplotlib is the plot extra; CI installs it (nox: test,plot) and must not skip."""
    try:
        require_matplotlib()
    except PlotError:
        if in_ci():
            raise
        pytest.skip("matplotlib is not installed (pip install -e '.[plot]')")


def test_simulate_draws_a_png(tmp_path: Path) -> None:
    out = tmp_path / "placement.png"
    proc = run_cli("simulate", "--config", str(TOPOLOGY_AWARE), "--workload", str(WORKLOAD),
                   "--machine", "n4c16-isolated", "--plot", str(out), expect=0)  # fmt: skip
    assert f"wrote {out}" in proc.stderr
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(data) > 20_000  # a real picture, not an empty canvas


async def test_the_svg_names_every_cpu_container_and_memory_node(tmp_path: Path) -> None:
    out = tmp_path / "placement.svg"
    with open_machine("four-numa-dies") as machine:
        result = await simulate(machine, config("topology-aware"),
                                parse_workload(WORKLOAD.read_text()), tmp_path)  # fmt: skip
        plot(result, out)
    svg = out.read_text()
    for c in result.live:
        assert c.label in svg  # the list of running containers, with cpus and mems
        assert c.final is not None and c.final.mems in svg
    for label in ("socket 0", "die 0", "die 1", "NUMA node 3 (2Gi)", "reserved (R)"):
        assert label in svg
    # matplotlib draws SVG text as paths, each preceded by a comment holding the text.
    for cpu in result.machine.system.online:
        assert f"<!-- {cpu} -->" in svg


def test_without_matplotlib_simulate_says_how_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(PlotError, match=r"pip install 'nri-resmgr\[plot\]'"):
        require_matplotlib()
