"""The fleet figures as text: one block per fleet size, per-node counts first."""

from __future__ import annotations

from typing import Any

from tests.fleet import budgets


def summary(result: dict[str, Any]) -> str:
    n = result["agents"]
    lines = [f"## {n} agents ({result.get('code', '')})"]
    if "startup" in result:
        s = result["startup"]
        after = s.get("seconds_until_all_ready", s.get("incomplete"))
        lines.append(f"start-up: {s['per_node']} requests/node, all ready after "
                     f"{after} s, codes {s['by_code']}, 429s {s['rejected_429'] or 0}")  # fmt: skip
        lines.extend(_per_node(s["by_verb_resource"], n))
        lines.append(f"  watches the server closed: {_closed(s, every=True)}")
        if budgets.reopens_note(s):
            lines.append(f"  watches re-opened: {budgets.reopens_note(s)}")
    if "steady" in result:
        s = result["steady"]
        rate, cpu = s["requests_per_node_per_minute"], s["agent_cpu_ms_per_minute"]
        lines.append(f"steady ({s['minutes']} min): {rate} requests/node/min, "
                     f"agent CPU {cpu} ms/min")  # fmt: skip
        lines.extend(f"  {k}: {v}/node/min" for k, v in s["per_node_per_minute"].items())
    if "config_change" in result:
        s = result["config_change"]
        lines.append(f"config change: {s['per_node']} requests/node, all reported after "
                     f"{s.get('seconds_until_all_reported', s.get('incomplete'))} s, CR "
                     f"{s.get('config_cr_bytes')} bytes ({s.get('config_cr_status_entries')} "
                     f"entries), conflicts seen by agents "
                     f"{s.get('status_conflicts_seen_by_agents')}, watch events "
                     f"{s['bytes']['watch_event_count']:.0f} "
                     f"({s['bytes']['watch_events'] / 1e6:.1f} MB)")  # fmt: skip
        lines.extend(_per_node(s["by_verb_resource"], n))
    if "restart" in result:
        s = result["restart"]
        lines.append(f"restart (down {s['down_seconds']} s): {s['per_node']} requests/node, "
                     f"watches back after {s['seconds_until_watches_back']} s, change reported "
                     f"after {s['seconds_until_change_reported']} s, codes {s['by_code']}, "
                     f"429s {s['rejected_429'] or 0}")  # fmt: skip
        lines.extend(_per_node(s["by_verb_resource"], n))
        lines.append(f"  watches the server closed: {_closed(s, every=True)}")
    if "footprint" in result:
        f = result["footprint"]
        lines.append(f"agent memory: {f['agent_rss_bytes'] / 1e6:.2f} MB RSS each; "
                     f"etcd {f['etcd_db_bytes'] / 1e6:.1f} MB")  # fmt: skip
    return "\n".join(lines)


def _per_node(by_verb_resource: dict[str, int], agents: int) -> list[str]:
    return [f"  {k}: {v} ({v / agents:.2f}/node)" for k, v in by_verb_resource.items()]


def markdown(results: list[dict[str, Any]]) -> str:
    """Tables for docs/fleet.md, one per scenario, one row per (fleet size, code)."""
    rows = sorted(results, key=lambda r: (r["agents"], r.get("label", "")))
    out: list[str] = []
    for title, key, columns in TABLES:
        out += [f"### {title}", "", "| N | code | " + " | ".join(c for c, _ in columns) + " |",
                "|---:|---|" + "---:|" * len(columns)]  # fmt: skip
        for r in rows:
            s = r.get(key)
            if s is None:
                continue
            cells = [_cell(f(r, s)) for _, f in columns]
            out.append(f"| {r['agents']} | {r.get('label', '')} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def footprint(results: list[dict[str, Any]]) -> str:
    """Per-agent memory and CPU, and etcd's size, per fleet size and code."""
    out = ["| N | code | memory per agent (MB RSS) | CPU per agent, steady (ms/min) | "
           "etcd at the end (MB) |", "|---:|---|---:|---:|---:|"]  # fmt: skip
    for r in sorted(results, key=lambda r: (r["agents"], r.get("label", ""))):
        f = r.get("footprint_end") or r.get("footprint") or {}
        cpu = (r.get("steady") or {}).get("agent_cpu_ms_per_minute")
        out.append(f"| {r['agents']} | {r.get('label', '')} | "
                   f"{_cell(f.get('agent_rss_bytes', 0) / 1e6)} | {_cell(cpu)} | "
                   f"{_cell(f.get('etcd_db_bytes', 0) / 1e6)} |")  # fmt: skip
    return "\n".join(out)


def _cell(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)


def _verbs(s: dict[str, Any], n: int) -> str:
    return ", ".join(f"{k} {v / n:.2f}" for k, v in s["by_verb_resource"].items())


def _per_minute(s: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in s["per_node_per_minute"].items()) or "none"


def _reached(s: dict[str, Any], done: str) -> Any:
    if "incomplete" in s:
        return f"{s['incomplete']['reached']} of {s['incomplete']['of']} after the limit"
    return s.get(done)


def _status_codes(s: dict[str, Any]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in s["by_code"].items() if k not in ("200", "201"))


def _closed(s: dict[str, Any], every: bool = False) -> str:
    """Watchers the watch cache closed as unresponsive / its re-initializations, per
    resource (``every``: the zeros too, to show the counters were read; n/a: a run from
    before the harness read them)."""
    if "server_closed_watches" not in s:
        return "n/a"
    shown = [
        f"{resource} {c['terminated']}/{c['cache_reinitialized']}"
        for resource, c in s["server_closed_watches"].items()
        if every or c["terminated"] or c["cache_reinitialized"]
    ]
    return ", ".join(shown) or "none"


def _refused(s: dict[str, Any], n: int) -> float:
    return budgets.refused(s) / n


def _rejected(s: dict[str, Any]) -> int:
    return round(sum(s["rejected_429"].values()))


Row = dict[str, Any]
TABLES: list[tuple[str, str, list[tuple[str, Any]]]] = [
    ("Start-up of all N at once", "startup", [
        ("requests/node", lambda r, s: s["per_node"]),
        ("of which refused (429/5xx) and sent again", lambda r, s: _refused(s, r["agents"])),
        ("by verb and resource, per node", lambda r, s: _verbs(s, r["agents"])),
        ("other codes", lambda r, s: _status_codes(s)),
        ("429 (APF)", lambda r, s: _rejected(s)),
        ("watch events (MB)", lambda r, s: f"{s['bytes']['watch_event_count']:,.0f} "
                                           f"({s['bytes']['watch_events'] / 1e6:.1f})"),
        ("watches closed by the server (unresponsive/cache re-init)", lambda r, s: _closed(s)),
        ("all ready after (s)", lambda r, s: _reached(s, "seconds_until_all_ready")),
    ]),
    ("Steady state", "steady", [
        ("requests/node/min", lambda r, s: s["requests_per_node_per_minute"]),
        ("by verb and resource, per node per minute", lambda r, s: _per_minute(s)),
        ("bytes sent/node/min", lambda r, s: (s["bytes"]["response"] + s["bytes"]["watch_events"])
                                             / r["agents"] / s["minutes"]),
        ("agent CPU (ms/min)", lambda r, s: s["agent_cpu_ms_per_minute"]),
        ("window (min)", lambda r, s: s["minutes"]),
    ]),
    ("A config change of the whole group", "config_change", [
        ("requests/node", lambda r, s: s["per_node"]),
        ("of which refused (429/5xx) and sent again", lambda r, s: _refused(s, r["agents"])),
        ("by verb and resource, per node", lambda r, s: _verbs(s, r["agents"])),
        ("other codes", lambda r, s: _status_codes(s)),
        ("CR bytes (entries)", lambda r, s: f"{s.get('config_cr_bytes')} "
                                            f"({s.get('config_cr_status_entries')})"),
        ("conflicts seen by agents", lambda r, s: s.get("status_conflicts_seen_by_agents")),
        ("watch events (MB)", lambda r, s: f"{s['bytes']['watch_event_count']:,.0f} "
                                           f"({s['bytes']['watch_events'] / 1e6:.1f})"),
        ("all reported after (s)", lambda r, s: _reached(s, "seconds_until_all_reported")),
    ]),
    ("API server restart, a change made meanwhile", "restart", [
        ("requests/node", lambda r, s: s["per_node"]),
        ("by verb and resource, per node", lambda r, s: _verbs(s, r["agents"])),
        ("other codes", lambda r, s: _status_codes(s)),
        ("429 (APF)", lambda r, s: _rejected(s)),
        ("watches closed by the server (unresponsive/cache re-init)", lambda r, s: _closed(s)),
        ("down (s)", lambda r, s: s["down_seconds"]),
        ("watches back after (s)", lambda r, s: s["seconds_until_watches_back"]),
        ("change at every agent after (s)", lambda r, s: s["seconds_until_change_reported"]),
    ]),
]  # fmt: skip


if __name__ == "__main__":
    import json
    import sys
    from pathlib import Path

    loaded = []
    for name in sys.argv[1:]:
        result = json.loads(Path(name).read_text())
        result.setdefault("label", Path(name).stem.rsplit("-", 1)[-1])
        loaded.append(result)
    print(markdown(loaded))
    print(footprint(loaded))
