"""The sysfs an upstream e2e VM shows, from its ``topology.var.json``.

nri-plugins' e2e framework turns each ``topology.var.json`` into qemu options
(``test/e2e/lib/topology2qemuopts.py``); the guest kernel then numbers things as follows,
and that is what is written here:

- Every group with ``cores`` adds ``packages`` sockets, each of ``dies`` dies of ``nodes``
  NUMA nodes, each node ``cores`` cores of ``threads`` threads (default 2). CPU ids run
  thread by thread, core by core, node by node, socket by socket; NUMA node ids likewise.
- A group without ``cores`` adds CPU-less memory nodes after the ones before it.
- Node distances: 10 to itself; ``node-dist`` where given (symmetric); else 11 on the same
  die and 21 otherwise.
- ``mem`` is each node's MemTotal. ``cpus-present`` and hot-plugging are the scenario's
  business: pass ``online`` to write only those CPUs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from nri_resmgr.cpuset import CpuSet

SAME_DIE, OTHER = 11, 21


@attrs.frozen
class VmCpu:
    id: int
    package: int
    die: int
    node: int
    core: int
    siblings: tuple[int, ...]


@attrs.frozen
class VmTopology:
    cpus: tuple[VmCpu, ...]
    node_memory: Mapping[int, int]
    """Node -> bytes."""
    distances: Mapping[int, Mapping[int, int]]

    @property
    def nodes(self) -> list[int]:
        return sorted(self.node_memory)


def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = str(text).strip()
    if text in ("", "0"):
        return 0
    return int(float(text[:-1]) * units[text[-1].upper()])


def vm_topology(groups: Sequence[Mapping[str, Any]]) -> VmTopology:
    """The topology qemu builds from a parsed ``topology.var.json``."""
    cpus: list[VmCpu] = []
    memory: dict[int, int] = {}
    place: dict[int, tuple[int, int]] = {}  # node -> (package, die)
    explicit: dict[int, dict[int, int]] = {}
    next_cpu, next_node, next_package = 0, 0, 0
    threads = next((int(g.get("threads", 2)) for g in groups if int(g.get("cores", 0))), 2)
    for g in groups:
        cores = int(g.get("cores", 0))
        first = next_node
        for _ in range(int(g.get("packages", 1))):
            package = next_package if cores else -1
            for die in range(int(g.get("dies", 1))):
                for _ in range(int(g.get("nodes", 1))):
                    node = next_node
                    next_node += 1
                    memory[node] = _size(g.get("mem", "0"))
                    place[node] = (package, die) if cores else (-1 - node, 0)
                    for core in range(cores):
                        ids = tuple(range(next_cpu, next_cpu + threads))
                        next_cpu += threads
                        core_id = (node - first) * cores + core
                        cpus.extend(VmCpu(i, package, die, node, core_id, ids) for i in ids)
            if cores:
                next_package += 1
        for n in range(first, next_node):
            for other, d in g.get("node-dist", {}).items():
                explicit.setdefault(n, {})[int(other)] = int(d)
    distances: dict[int, dict[int, int]] = {n: {} for n in memory}
    for a in memory:
        for b in memory:
            if a == b:
                distances[a][b] = 10
            elif b in explicit.get(a, {}):
                distances[a][b] = distances[b][a] = explicit[a][b]
            elif a in explicit.get(b, {}):
                distances[a][b] = explicit[b][a]
            elif b not in distances[a]:
                distances[a][b] = SAME_DIE if place[a] == place[b] else OTHER
    return VmTopology(tuple(cpus), memory, distances)


def write_vm_sysfs(root: Path, topo: VmTopology, online: Iterable[int] | None = None) -> Path:
    """Write ``topo`` as ``root/sys/devices/system/{cpu,node}``; return ``root``."""
    keep = CpuSet(online) if online is not None else CpuSet(c.id for c in topo.cpus)
    cpu_dir = root / "sys/devices/system/cpu"
    node_dir = root / "sys/devices/system/node"
    cpu_dir.mkdir(parents=True, exist_ok=True)
    for c in topo.cpus:
        if c.id not in keep:
            continue
        t = cpu_dir / f"cpu{c.id}/topology"
        t.mkdir(parents=True, exist_ok=True)
        (t / "physical_package_id").write_text(f"{c.package}\n")
        (t / "die_id").write_text(f"{c.die}\n")
        (t / "core_id").write_text(f"{c.core}\n")
        (t / "thread_siblings_list").write_text(f"{CpuSet(c.siblings) & keep}\n")
    (cpu_dir / "online").write_text(f"{keep}\n")
    (cpu_dir / "isolated").write_text("\n")
    nodes = topo.nodes
    for n in nodes:
        d = node_dir / f"node{n}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "cpulist").write_text(f"{CpuSet(c.id for c in topo.cpus if c.node == n) & keep}\n")
        kb = topo.node_memory[n] // 1024
        (d / "meminfo").write_text(f"Node {n} MemTotal:       {kb} kB\nNode {n} MemFree: {kb} kB\n")
        (d / "distance").write_text(" ".join(str(topo.distances[n][o]) for o in nodes) + "\n")
    (node_dir / "online").write_text(f"{CpuSet(nodes)}\n")
    has_cpu = CpuSet(c.node for c in topo.cpus if c.id in keep)
    (node_dir / "has_cpu").write_text(f"{has_cpu}\n")
    (node_dir / "has_memory").write_text(f"{CpuSet(n for n in nodes if topo.node_memory[n])}\n")
    return root


def write_caches(root: Path, caches: Sequence[Mapping[str, Any]]) -> None:
    """Upstream's OVERRIDE_SYS_CACHES as the kernel's ``cpuN/cache/indexM`` files: one
    index per (level, kind), data/unified before instruction, lower levels first. As
    upstream's parseCpuCacheOverrides reads it, each cpuset string of an entry is a cache
    of its own, ids counted per (level, kind) in the order listed."""
    order = sorted({(int(c["level"]), c.get("kind", "u")) for c in caches},
                   key=lambda lk: (lk[0], lk[1] == "i"))  # fmt: skip
    seen: dict[tuple[int, str], int] = {}
    for c in caches:
        key = (int(c["level"]), c.get("kind", "u"))
        for text in c["cpusets"]:
            cache_id = seen[key] = seen.get(key, -1) + 1
            _write_cache(root, c, order.index(key), cache_id, CpuSet.parse(text))


def _write_cache(
    root: Path, c: Mapping[str, Any], index: int, cache_id: int, shared: CpuSet
) -> None:
    kinds = {"d": "Data", "i": "Instruction", "u": "Unified"}
    for cpu in shared:
        d = root / f"sys/devices/system/cpu/cpu{cpu}/cache/index{index}"
        if not d.parent.parent.is_dir():
            continue
        d.mkdir(parents=True, exist_ok=True)
        (d / "level").write_text(f"{c['level']}\n")
        (d / "type").write_text(f"{kinds[c.get('kind', 'u')]}\n")
        (d / "size").write_text(f"{c['size']}\n")
        (d / "id").write_text(f"{cache_id}\n")
        (d / "shared_cpu_list").write_text(f"{shared}\n")
