"""Synthetic CPU details on top of a ``synthetic.write_sysfs`` tree: caches, cpufreq base
frequency and EPP, hybrid core kinds, cluster ids, and the ``cpuN/nodeM`` entries the kernel has.

Caches are given as nri-plugins' ``OVERRIDE_SYS_CACHES`` gives them (its e2e tests describe
L3 complexes that way): a list of ``{"cpusets": [...], "level": N, "kind": "u|d|i"}``, each
cpuset one cache, ids numbered per level and kind in the order listed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

import attrs

from nri_resmgr.cpuset import CpuSet

__all__ = [
    "CacheSpec",
    "link_numa_nodes",
    "parse_cache_overrides",
    "write_caches",
    "write_cluster_ids",
    "write_core_kinds",
    "write_cpufreq",
]

_KINDS = {"": "Unified", "u": "Unified", "unified": "Unified", "d": "Data", "data": "Data"}
_KINDS |= {"i": "Instruction", "instruction": "Instruction"}


@attrs.frozen
class CacheSpec:
    level: int
    cpusets: tuple[str, ...]
    kind: str = "Unified"
    size: str = "16M"


def parse_cache_overrides(text: str) -> tuple[CacheSpec, ...]:
    """The ``OVERRIDE_SYS_CACHES`` JSON of nri-plugins as cache specs."""
    out = []
    for entry in json.loads(text):
        kind = _KINDS[str(entry.get("kind", "")).lower()]
        level = int(entry.get("level", 1)) or 1
        out.append(CacheSpec(level, tuple(entry["cpusets"]), kind, str(entry.get("size", "1M"))))
    return tuple(out)


def write_caches(root: Path, specs: Iterable[CacheSpec]) -> None:
    """``cpuN/cache/indexM`` for every CPU a spec names; ids count per (level, kind)."""
    per_cpu: dict[int, list[tuple[int, str, int, CpuSet, str]]] = {}
    next_id: dict[tuple[int, str], int] = {}
    for spec in specs:
        for text in spec.cpusets:
            cpus = CpuSet.parse(text)
            key = (spec.level, spec.kind)
            cache_id = next_id.get(key, 0)
            next_id[key] = cache_id + 1
            for cpu in cpus:
                per_cpu.setdefault(cpu, []).append(
                    (spec.level, spec.kind, cache_id, cpus, spec.size)
                )
    cpu_dir = root / "sys/devices/system/cpu"
    for cpu, caches in per_cpu.items():
        caches.sort(key=lambda c: (c[0], c[1]))
        for index, (level, kind, cache_id, cpus, size) in enumerate(caches):
            path = cpu_dir / f"cpu{cpu}/cache/index{index}"
            path.mkdir(parents=True, exist_ok=True)
            for name, value in (
                ("level", level),
                ("type", kind),
                ("id", cache_id),
                ("shared_cpu_list", cpus),
                ("size", size),
            ):
                (path / name).write_text(f"{value}\n")


def write_cpufreq(
    root: Path, base_khz: Mapping[str, int] | None = None, epp: Mapping[str, str] | None = None
) -> None:
    """``cpufreq/base_frequency`` and ``energy_performance_preference``, by cpuset."""
    cpu_dir = root / "sys/devices/system/cpu"
    for name, values in (
        ("base_frequency", base_khz or {}),
        ("energy_performance_preference", epp or {}),
    ):
        for text, value in values.items():
            for cpu in CpuSet.parse(text):
                path = cpu_dir / f"cpu{cpu}/cpufreq"
                path.mkdir(parents=True, exist_ok=True)
                (path / name).write_text(f"{value}\n")


def write_core_kinds(root: Path, performance: str, efficient: str) -> None:
    """A hybrid machine: ``devices/cpu_core/cpus`` and ``devices/cpu_atom/cpus``."""
    for name, cpus in (("cpu_core", performance), ("cpu_atom", efficient)):
        path = root / "sys/devices" / name
        path.mkdir(parents=True, exist_ok=True)
        (path / "cpus").write_text(f"{CpuSet.parse(cpus)}\n")


def write_cluster_ids(root: Path, clusters: Mapping[str, int]) -> None:
    """``cpuN/topology/cluster_id``: each cpuset of ``clusters`` shares the id it maps to."""
    cpu_dir = root / "sys/devices/system/cpu"
    for text, cluster_id in clusters.items():
        for cpu in CpuSet.parse(text):
            (cpu_dir / f"cpu{cpu}/topology/cluster_id").write_text(f"{cluster_id}\n")


def link_numa_nodes(root: Path) -> None:
    """What else the kernel has and nri-plugins' sysfs discovery needs: ``cpuN/nodeM``
    directories, ``cpu/{possible,present}`` and ``node/{possible,has_cpu,has_memory,...}``."""
    cpu_dir = root / "sys/devices/system/cpu"
    node_dir = root / "sys/devices/system/node"
    online = (cpu_dir / "online").read_text()
    for name in ("possible", "present"):
        (cpu_dir / name).write_text(online)
    with_cpus, with_memory = [], []
    for node in node_dir.glob("node[0-9]*"):
        cpus = CpuSet.parse((node / "cpulist").read_text().strip())
        for cpu in cpus:
            (cpu_dir / f"cpu{cpu}/{node.name}").mkdir(exist_ok=True)
        if cpus:
            with_cpus.append(int(node.name[4:]))
        if " 0 kB" not in (node / "meminfo").read_text().splitlines()[0]:
            with_memory.append(int(node.name[4:]))
    for name, ids in (
        ("possible", [int(n.name[4:]) for n in node_dir.glob("node[0-9]*")]),
        ("has_cpu", with_cpus),
        ("has_memory", with_memory),
        ("has_normal_memory", with_memory),
    ):
        (node_dir / name).write_text(f"{CpuSet(ids)}\n")
