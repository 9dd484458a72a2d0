"""The placement picture: sockets → dies → NUMA nodes → cores → threads, as nested boxes.

Each CPU is a cell coloured by the set of running containers whose cpuset holds it (one
container: exclusive; several: a shared pool), white when idle; reserved CPUs are hatched
and marked R, isolated ones marked I, CPUs outside availableResources greyed. Below the
grid: the legend, and every running container with its cpus and memory nodes.

matplotlib is an optional extra (``pip install 'nri-resmgr[plot]'``); it is imported only
here, and only when a picture is asked for.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.errors import ResmgrError
from nri_resmgr.sim.records import SimulationResult
from nri_resmgr.sim.report import UNPINNED, cpu_users, format_memory
from nri_resmgr.sysfs import System

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["PlotError", "plot", "require_matplotlib"]

MAX_CORES_PER_ROW = 8
MAX_WIDTH = 48.0
"""Grid units (one CPU cell is 1) beyond which sockets are stacked rather than side by side."""
GAP = 0.3
BAND = 0.7
"""Height of the label band at the top of each frame."""
CORE_GAP = 0.15
IDLE = "#ffffff"
UNAVAILABLE = "#bdbdbd"


class PlotError(ResmgrError):
    """No picture: matplotlib is missing, or the file cannot be written."""


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PlotError(
            "--plot needs matplotlib, which is not installed: "
            "pip install 'nri-resmgr[plot]' (or pip install matplotlib)"
        ) from None


@attrs.frozen
class _Box:
    x: float
    y: float
    w: float
    h: float


def plot(result: SimulationResult, out: Path) -> None:
    require_matplotlib()
    from matplotlib.figure import Figure

    system = result.machine.system
    users = cpu_users(result)
    groups = sorted({tuple(u) for u in users.values() if u}, key=lambda g: (len(g) > 1, g))
    colours = _palette(len(groups))
    colour_of = {g: colours[i] for i, g in enumerate(groups)}
    layout = _Layout.of(system)
    cells, width, height = layout.cells, layout.width, layout.height
    rows = max(len(groups) + 4, len(result.live) + 2)
    scale = 0.5
    grid_h, text_h = height * scale, rows * 0.2 + 0.3
    fig = Figure(figsize=(max(10.0, width * scale), grid_h + text_h + 0.4))
    total = grid_h + text_h + 0.4
    ax = fig.add_axes((0.01, (text_h + 0.1) / total, 0.98, grid_h / total))
    ax.set_xlim(0, width)
    ax.set_ylim(height, 0)
    ax.set_aspect("equal")
    ax.axis("off")
    _draw_frames(ax, layout.frames)
    for cpu, box in cells.items():
        group = tuple(users.get(cpu, []))
        face = colour_of.get(group, IDLE) if cpu in result.allowed else UNAVAILABLE
        _cell(ax, box, cpu, face, cpu in result.reserved, cpu in system.isolated)
    fig.suptitle(f"{result.policy} on {result.machine.description}", fontsize=11, y=0.995)
    text_ax = fig.add_axes((0.01, 0.0, 0.98, text_h / total))
    text_ax.axis("off")
    _legend(text_ax, groups, colour_of, bool(system.online - result.allowed))
    _container_list(text_ax, result)
    try:
        fig.savefig(out, dpi=110)
    except (OSError, ValueError) as exc:
        raise PlotError(f"{out}: cannot write the picture: {exc}") from exc


def _palette(n: int) -> list[str]:
    from matplotlib import colormaps

    base = [colormaps["tab20"](i) for i in range(0, 20, 2)]
    base += [colormaps["tab20"](i) for i in range(1, 20, 2)]
    base += [colormaps["Set3"](i) for i in range(12)]
    from matplotlib.colors import to_hex

    return [to_hex(base[i % len(base)]) for i in range(n)]


def _cores(system: System, node_cpus: CpuSet) -> list[list[int]]:
    cores: dict[tuple[int, ...], None] = {}
    for cpu in node_cpus:
        cores[tuple(sorted(system.core_of(cpu) & node_cpus))] = None
    return [list(c) for c in sorted(cores, key=lambda c: c[0])]


@attrs.frozen
class _Frame:
    box: _Box
    label: str
    face: str
    line: float


class _Layout:
    """Nested frames: sockets (side by side, or in rows when that would be too wide), their
    dies (when more than one), their NUMA nodes, left to right, whose cores
    are columns of thread cells, at most MAX_CORES_PER_ROW to a row."""

    def __init__(self, system: System, columns: int) -> None:
        self.system = system
        self.cells: dict[int, _Box] = {}
        self.frames: list[_Frame] = []
        x, y, width, row_h = GAP, GAP, 0.0, 0.0
        for i, pkg in enumerate(system.packages()):
            if i and i % columns == 0:
                x, y, row_h = GAP, y + row_h + GAP, 0.0
            w, h = self._package(pkg, x, y)
            x, width, row_h = x + w + GAP, max(width, x + w + GAP), max(row_h, h)
        self.width, self.height = width, y + row_h + GAP

    @classmethod
    def of(cls, system: System) -> _Layout:
        """Sockets side by side; when that is too wide, in rows of about sqrt(sockets)."""
        count = len(system.packages())
        wide = cls(system, columns=count)
        if wide.width <= MAX_WIDTH or count == 1:
            return wide
        return cls(system, columns=math.ceil(math.sqrt(count)) if count > 2 else 1)

    def _package(self, pkg: int, x: float, y: float) -> tuple[float, float]:
        dies = self.system.dies(pkg)
        cx, h = x + GAP, 0.0
        for die in dies:
            cpus = self.system.die_cpus(pkg, die)
            if len(dies) > 1:
                w, dh = self._die(die, cpus, cx, y + BAND)
            else:
                w, dh = self._nodes(cpus, cx, y + BAND)
            cx, h = cx + w + GAP, max(h, dh)
        box = _Box(x, y, cx - x, h + BAND + GAP)
        self.frames.append(_Frame(box, f"socket {pkg}", "#f1f1f1", 1.6))
        return box.w, box.h

    def _die(self, die: int, cpus: CpuSet, x: float, y: float) -> tuple[float, float]:
        w, h = self._nodes(cpus, x + GAP, y + BAND)
        box = _Box(x, y, w + 2 * GAP, h + BAND + GAP)
        self.frames.append(_Frame(box, f"die {die}", "#e6edf7", 1.2))
        return box.w, box.h

    def _nodes(self, cpus: CpuSet, x: float, y: float) -> tuple[float, float]:
        cx, h = x, 0.0
        for node in self.system.nodes_of(cpus):
            n = self.system.nodes[node]
            w, nh = self._node(
                f"NUMA node {node} ({format_memory(n.memory)})", cpus & n.cpus, cx, y
            )
            cx, h = cx + w + GAP, max(h, nh)
        return cx - x - GAP, h

    def _node(self, label: str, cpus: CpuSet, x: float, y: float) -> tuple[float, float]:
        cores = _cores(self.system, cpus)
        # Big nodes get wider rows, so that no frame grows much taller than wide.
        per_row = min(len(cores), max(MAX_CORES_PER_ROW, math.ceil(math.sqrt(2 * len(cores)))))
        per_row = per_row or 1
        threads = max((len(c) for c in cores), default=1)
        for i, core in enumerate(cores):
            cx = x + GAP + (i % per_row) * (1 + CORE_GAP)
            cy = y + BAND + (i // per_row) * (threads + CORE_GAP)
            for t, cpu in enumerate(core):
                self.cells[cpu] = _Box(cx, cy + t, 1.0, 1.0)
        rows = math.ceil(len(cores) / per_row)
        w = per_row * (1 + CORE_GAP) - CORE_GAP + 2 * GAP
        w = max(w, 0.13 * len(label) + 0.4)  # room for the label
        box = _Box(x, y, w, BAND + rows * (threads + CORE_GAP) - CORE_GAP + GAP)
        self.frames.append(_Frame(box, label, "#fbfbe6", 1.0))
        return box.w, box.h


def _draw_frames(ax: Axes, frames: Sequence[_Frame]) -> None:
    from matplotlib.patches import Rectangle

    # Children are laid out (and listed) before their parents: draw outermost first.
    for f in reversed(frames):
        b = f.box
        ax.add_patch(
            Rectangle(
                (b.x, b.y),
                b.w,
                b.h,
                facecolor=f.face,
                edgecolor="#555555",
                linewidth=f.line,
                zorder=1,
            )
        )
        ax.text(b.x + 0.15, b.y + BAND / 2, f.label, fontsize=7.5, va="center", ha="left", zorder=3)


def _cell(ax: Axes, box: _Box, cpu: int, face: str, reserved: bool, isolated: bool) -> None:
    from matplotlib.patches import Rectangle

    ax.add_patch(
        Rectangle(
            (box.x, box.y),
            box.w,
            box.h,
            facecolor=face,
            edgecolor="#222222",
            linewidth=0.8,
            hatch="///" if reserved else None,
            zorder=2,
        )
    )
    ax.text(box.x + 0.5, box.y + 0.45, str(cpu), fontsize=7, ha="center", va="center", zorder=4)
    marks = ("R" if reserved else "") + ("I" if isolated else "")
    if marks:
        ax.text(
            box.x + 0.93,
            box.y + 0.95,
            marks,
            fontsize=7,
            ha="right",
            va="bottom",
            fontweight="bold",
            color="#b00020",
            zorder=4,
        )


def _group_label(group: Sequence[str]) -> str:
    if len(group) == 1:
        return group[0]
    shown = ", ".join(group[:3]) + (", …" if len(group) > 3 else "")
    return f"shared by {len(group)}: {shown}"


def _legend(
    ax: Axes,
    groups: list[tuple[str, ...]],
    colour_of: dict[tuple[str, ...], str],
    unavailable: bool,
) -> None:
    from matplotlib.patches import Patch

    handles = [
        Patch(facecolor=colour_of[g], edgecolor="#222222", label=_group_label(g)) for g in groups
    ]
    handles.append(Patch(facecolor=IDLE, edgecolor="#222222", label="idle"))
    handles.append(Patch(facecolor=IDLE, edgecolor="#222222", hatch="///", label="reserved (R)"))
    if unavailable:
        handles.append(
            Patch(facecolor=UNAVAILABLE, edgecolor="#222222", label="not available to the policy")
        )
    ax.legend(
        handles=handles,
        loc="upper left",
        bbox_to_anchor=(0.0, 1.0),
        fontsize=7.5,
        frameon=False,
        title="CPU users (I = kernel-isolated)",
        title_fontsize=8,
        alignment="left",
    )


def _container_list(ax: Axes, result: SimulationResult) -> None:
    width = max([len(c.label) for c in result.live] + [17])
    lines = [f"{'running container':<{width}}  {'cpus':<16}  memory nodes"]
    for c in result.live:
        final = c.final
        cpus = (final.cpus or UNPINNED) if final else "-"
        mems = (final.mems or UNPINNED) if final else "-"
        lines.append(f"{c.label:<{width}}  {cpus:<16}  {mems}")
    ax.text(
        0.5,
        0.98,
        "\n".join(lines),
        transform=ax.transAxes,
        family="monospace",
        fontsize=7.5,
        va="top",
        ha="left",
    )
