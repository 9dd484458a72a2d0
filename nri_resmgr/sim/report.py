"""A simulation as the placement table (for people) and as JSON (for scripts)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.sim.records import ContainerRecord, Placement, SimulationResult, Status
from nri_resmgr.sim.workload import Amounts
from nri_resmgr.sysfs import System

__all__ = [
    "JSON_VERSION",
    "format_memory",
    "machine_summary",
    "render_json",
    "render_table",
    "to_json",
]

JSON_VERSION = 1
UNPINNED = "(all)"
"""An empty cpuset on the runtime's side: the container inherits the pod's, i.e. all CPUs."""


def render_table(result: SimulationResult) -> str:
    system = result.machine.system
    lines = [
        f"policy {result.policy} on {result.machine.description}: {machine_summary(system)}",
        f"reserved cpus {result.reserved or '-'}; isolated {system.isolated or '-'}; "
        f"available to the policy {result.allowed}",
        "",
    ]
    if result.startup:
        lines += ["at start:"] + [f"  {m}" for m in result.startup] + [""]
    header = [
        "step",
        "container",
        "qos",
        "mCPU req/lim",
        "mem lim",
        "cpus at create",
        "cpus now",
        "mems now",
        "moved",
        "status",
    ]
    rows = [_row(c) for c in result.containers]
    lines += _columns([header, *rows])
    failures = [c for c in result.containers if c.error]
    if failures:
        lines += ["", "failed:"] + [f"  {c.label}: {c.error}" for c in failures]
    events = [s for s in result.steps if s.action != "add" or s.messages]
    if events:
        lines += ["", "steps:"]
        for s in events:
            lines.append(f"  {s.number} {s.action} {s.target}: {'ok' if s.ok else 'FAILED'}")
            lines += [f"      {m}" for m in s.messages]
    if result.problems:
        lines += ["", "workload problems (documents skipped):"]
        lines += [f"  {p}" for p in result.problems]
    if result.notes:
        lines += ["", "notes:"] + [f"  {p}" for p in result.notes]
    return "\n".join(lines)


def machine_summary(system: System) -> str:
    nodes = "; ".join(
        f"node{n.id}: cpus {n.cpus or '-'}, {format_memory(n.memory)}"
        for n in system.nodes.values()
    )
    return (
        f"{len(system.online)} CPUs ({system.online}), {len(system.packages())} socket(s); {nodes}"
    )


def _row(c: ContainerRecord) -> list[str]:
    step = str(c.step)
    created = _cpus(c.created.cpus) if c.created else "-"
    final = c.final
    if c.status == Status.REMOVED:
        status = f"removed@{c.ended_at}"
    elif c.status == Status.FAILED:
        status = "FAILED"
    else:
        status = c.status
    return [
        step,
        c.label if c.role == "app" else f"{c.label} ({c.role})",
        c.qos,
        f"{_milli(c.requests.cpu)}/{_milli(c.limits.cpu)}",
        format_memory(c.limits.memory) if c.limits.memory else "-",
        created,
        _cpus(final.cpus) if final else "-",
        (final.mems or UNPINNED) if final else "-",
        str(c.repinned),
        status,
    ]


def _columns(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def _cpus(text: str) -> str:
    return text or UNPINNED


def _milli(value: int | None) -> str:
    return "-" if value is None else str(value)


def format_memory(value: int | None) -> str:
    if not value:
        return "0"
    for unit, size in (("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if value >= size:
            amount = value / size
            return f"{amount:.0f}{unit}" if amount == int(amount) else f"{amount:.1f}{unit}"
    return f"{value}B"


# -- JSON -----------------------------------------------------------------------------------


def render_json(result: SimulationResult) -> str:
    return json.dumps(to_json(result), indent=2)


def to_json(result: SimulationResult) -> dict[str, Any]:
    system = result.machine.system
    return {
        "version": JSON_VERSION,
        "policy": result.policy,
        "machine": {
            "name": result.machine.name,
            "kind": result.machine.kind,
            "description": result.machine.description,
            "cpus": str(system.online),
            "isolated": str(system.isolated),
            "reserved": str(result.reserved),
            "available": str(result.allowed),
            "nodes": [
                {"id": n.id, "cpus": str(n.cpus), "memory": n.memory, "distances": n.distances}
                for n in system.nodes.values()
            ],
            "topology": [
                {
                    "cpu": c.id,
                    "package": c.package,
                    "die": c.die,
                    "node": c.node,
                    "threads": str(c.threads),
                }
                for c in system.cpus.values()
            ],
        },
        "steps": [
            {
                "step": s.number,
                "action": s.action,
                "target": s.target,
                "ok": s.ok,
                "messages": list(s.messages),
            }
            for s in result.steps
        ],
        "containers": [_container_json(c) for c in result.containers],
        "cpu_users": {str(cpu): users for cpu, users in cpu_users(result).items()},
        "startup": list(result.startup),
        "problems": [str(p) for p in result.problems],
        "notes": [str(p) for p in result.notes],
        "clean": result.clean,
    }


def _container_json(c: ContainerRecord) -> dict[str, Any]:
    final = c.final
    return {
        "pod": c.pod,
        "container": c.container,
        "id": c.container_id,
        "step": c.step,
        "role": c.role,
        "qos": c.qos,
        "requests": _amounts(c.requests),
        "limits": _amounts(c.limits),
        "status": c.status,
        "error": c.error,
        "created": _placement(c.created),
        "final": _placement(final),
        "history": [_placement(p) for p in c.history],
        "ended_at": c.ended_at,
    }


def _amounts(a: Amounts) -> dict[str, int | None]:
    return {"cpu": a.cpu, "memory": a.memory}


def _placement(p: Placement | None) -> dict[str, Any] | None:
    return None if p is None else {"step": p.step, "cpus": p.cpus, "mems": p.mems}


def cpu_users(result: SimulationResult) -> dict[int, list[str]]:
    """Per CPU, the running containers whose cpuset holds it (an empty cpuset: every CPU)."""
    users: dict[int, list[str]] = {cpu: [] for cpu in result.machine.system.online}
    for c in result.live:
        final = c.final
        if final is None:
            continue
        cpus = CpuSet.parse(final.cpus) if final.cpus else result.machine.system.online
        for cpu in cpus:
            if cpu in users:
                users[cpu].append(c.label)
    return users
