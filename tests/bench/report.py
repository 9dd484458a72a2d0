"""The one table, ``bench.json`` and the latency plot."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.bench.nri_phases import FLOOR


def machine() -> dict[str, Any]:
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "go": _go_version(),
    }


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _go_version() -> str:
    try:
        out = subprocess.run(["go", "version"], capture_output=True, text=True, check=False)
    except OSError:
        return "unknown"
    return out.stdout.strip().removeprefix("go version ")


def write_json(results: dict[str, Any], out_dir: Path) -> Path:
    path = out_dir / "bench.json"
    path.write_text(json.dumps(results, indent=1) + "\n")
    return path


def _fmt(value: Any, digits: int = 0) -> str:
    if value is None:
        return "-"
    if isinstance(value, float | int):
        return f"{value:,.{digits}f}"
    return str(value)


def table(results: dict[str, Any]) -> str:
    return "\n".join(_table_lines(results))


def _table_lines(r: dict[str, Any]) -> Iterator[str]:
    m = r["machine"]
    yield f"Machine: {m['nproc']} CPUs, {m['cpu_model']}; {m['date_utc']}; Python {m['python']}"
    yield f"Load average (1/5/15 min): start {r['load_start']}, end {r['load_end']}"
    nri = r.get("nri")
    if nri:
        for op, title in (
            ("create_container", "CreateContainer"),
            ("stop_container", "StopContainer"),
        ):
            yield from _latency_rows(nri[op], title)
        yield from _update_rows(nri["updates_per_reply"])
        yield ""
        yield (
            "| process | start to registered (s) | RSS at start (MiB) | RSS, 1,000 live (MiB) "
            "| state directory |"
        )
        yield "|---|---:|---:|---:|---|"
        for name, p in nri["processes"].items():
            yield (
                f"| {name} | {p['start_to_registered_s']:.2f} | {p['rss_kib_at_start'] / 1024:.1f}"
                f" | {p.get('rss_kib_at_1000', 0) / 1024:.1f} | {p.get('state', '-')} |"
            )
    if r.get("sync"):
        yield ""
        yield "| Synchronize, 1,000 existing containers | reply (ms, median) | all runs (ms) |"
        yield "|---|---:|---|"
        for name, s in r["sync"].items():
            failed = f" failed: {'; '.join(s['failures'])}" if s.get("failures") else ""
            yield f"| {name} | {_fmt(s['sync_ms_median'], 1)} | {s['sync_ms_all']}{failed} |"
    yield from _extra_rows(r)


def _update_rows(updates: dict[str, dict[str, Any]]) -> Iterator[str]:
    yield ""
    yield "Other containers' updates carried per reply (mean / max), by live population:"
    levels = list(updates)
    yield (
        "| contender | "
        + " | ".join(f"create, {lv} live | stop, {lv} live" for lv in levels)
        + " |"
    )
    yield "|---|" + "---:|---:|" * len(levels)
    for name in next(iter(updates.values())):
        cells = []
        for level in levels:
            u = updates[level][name]
            cells += [
                f"{u['create_mean']} / {u['create_max']}",
                f"{u['stop_mean']} / {u['stop_max']}",
            ]
        yield f"| {name} | " + " | ".join(cells) + " |"


def _latency_rows(by_level: dict[str, Any], title: str) -> Iterator[str]:
    yield ""
    yield f"NRI {title} round trip through the Go harness (NRI v0.12.2), in µs:"
    skipped = by_level.get("not_subscribed", [])
    if skipped:
        yield (
            f"(not subscribed to {title}, so the runtime skips the call and no ratio is "
            f"taken: {', '.join(skipped)})"
        )
    levels = {k: v for k, v in by_level.items() if k != "not_subscribed"}
    first_level = next(iter(levels.values()))
    ours = [n for n in first_level if n.startswith("ours/")]
    others = [n for n in first_level if not n.startswith("ours/")]
    compared = list(first_level[ours[0]]["vs"]) if ours else []
    header = "| live | contender | n | median | p99 | max |"
    header += "".join(f" ÷ {o} (median/p99) |" for o in compared)
    yield header
    yield "|---:|---|---:|---:|---:|---:|" + "---:|" * len(compared)
    for level, row in levels.items():
        for name in [*ours, *others]:
            s = row[name]
            cells = f"| {level} | {name} | {s['n']} | {_fmt(s['median_us'])} | "
            cells += f"{_fmt(s['p99_us'])} | {_fmt(s['max_us'])} |"
            for other in compared:
                vs = s.get("vs", {}).get(other)
                cells += f" {vs['median']} / {vs['p99']} |" if vs else " |"
            yield cells


def _containerd_rows(lane: dict[str, Any]) -> Iterator[str]:
    """The containerd lane: CRI round trips, each contender against none and the Go stub."""
    if "unavailable" in lane:
        yield ""
        yield f"containerd lane: unavailable: {lane['unavailable']}"
        return
    for op, by_level in lane.items():
        yield ""
        yield f"containerd v2.2.9 CRI {op.capitalize()}Container round trip (grpcio client), in µs:"
        yield (
            "| live | plugin | n | median | p99 | max "
            "| ÷ none (median/p99) | ÷ gostub (median/p99) |"
        )
        yield "|---:|---|---:|---:|---:|---:|---:|---:|"
        for level, rows in by_level.items():
            for name, s in rows.items():
                cells = [f"{v[0]} / {v[1]}" if v else "" for v in (
                    s.get("vs none"), s.get("vs gostub/fixed-cpus"))]  # fmt: skip
                yield (
                    f"| {level} | {name} | {s['n']} | {_fmt(s['median_us'])} | "
                    f"{_fmt(s['p99_us'])} | {_fmt(s['max_us'])} | {cells[0]} | {cells[1]} |"
                )


def _extra_rows(r: dict[str, Any]) -> Iterator[str]:
    if r.get("containerd"):
        yield from _containerd_rows(r["containerd"])
    policy = r.get("policy") or {}
    if policy:
        yield ""
        yield "| policy decision (in-process, synthetic, 128 CPUs unless named) | at 500 live |"
        yield "|---|---|"
        for name, p in policy.items():
            if "unavailable" in p:
                yield f"| {name} | unavailable: {p['unavailable']} |"
            else:
                yield (
                    f"| {name} | mean {p['create_ms_mean']} ms "
                    f"(CPU {p.get('create_cpu_ms_mean')} ms), p95 {p['create_ms_p95']} ms; "
                    f"Synchronize of {p['synchronize_containers']}: {p['synchronize_ms']} ms |"
                )
    dra = r.get("dra") or {}
    if dra:
        yield ""
        yield (
            "| DRA NodePrepareResources (grpcio client, one claim) | median (µs) | p99 (µs) "
            "| server CPU/call (µs) | client CPU/call (µs) |"
        )
        yield "|---|---:|---:|---:|---:|"
        for key, d in dra.items():
            if "unavailable" in d:
                yield f"| {key} | unavailable: {d['unavailable']} | | | |"
            else:
                cells = [d["median_us"], d["p99_us"]]
                cells += [d.get("server_cpu_us_per_call"), d.get("client_cpu_us_per_call")]
                yield f"| {key} | " + " | ".join(_fmt(c) for c in cells) + " |"
    if r.get("dra_chain"):
        from tests.bench_dra_chain import rows

        yield from rows(r["dra_chain"])
    if r.get("dra_grouped"):
        from tests.bench_dra_grouped import rows as grouped_rows

        yield from grouped_rows(r["dra_grouped"])


def plot(results: dict[str, Any], out_dir: Path) -> Path | None:
    """ECDFs of the CreateContainer samples, one panel per live population."""
    raw_by_op = results.get("nri", {}).get("raw_ns")
    if not raw_by_op:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e .[bench]): no plot")
        return None
    ops = {"create_container": "CreateContainer", "stop_container": "StopContainer"}
    n_levels = len(raw_by_op["create_container"])
    fig, axes = plt.subplots(
        len(ops), n_levels, figsize=(5 * n_levels, 4 * len(ops)), sharey=True, squeeze=False
    )
    for row, (op, title) in zip(axes, ops.items(), strict=True):
        for ax, (level, by_name) in zip(row, raw_by_op[op].items(), strict=True):
            for name, samples in by_name.items():
                us = sorted(s / 1000 for s in samples)
                ys = [(i + 1) / len(us) for i in range(len(us))]
                ax.step(us, ys, where="post", label=name, linestyle=":" if name == FLOOR else "-")
            ax.set_xscale("log")
            ax.set_title(f"{title}, {level} live containers")
            ax.set_xlabel("round trip (µs, log scale)")
            ax.grid(True, which="both", alpha=0.3)
        row[0].set_ylabel("fraction of calls ≤ x")
    axes[0][-1].legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    path = out_dir / "latency.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
