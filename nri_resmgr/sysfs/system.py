"""Discover CPUs, cores, dies, packages, NUMA nodes and isolated CPUs from ``<host_root>/sys``.

The result is a frozen snapshot: policies build their pools from it once per configuration.
"""

from __future__ import annotations

import enum
import logging
import re
from collections.abc import Mapping
from pathlib import Path

import attrs

from nri_resmgr.cpuset import CpuSet, CpuSetError
from nri_resmgr.errors import Fatal, InvalidValue
from nri_resmgr.sysfs.cpudetails import CpuDetails, read_details
from nri_resmgr.sysfs.files import read_attr

log = logging.getLogger(__name__)

_MEMTOTAL = re.compile(r"MemTotal:\s+(\d+)\s*kB")


class SysfsError(Fatal):
    """sysfs is missing or unreadable where the topology must come from: the daemon cannot
    place anything without it (exit 1, one line naming the path)."""


@attrs.frozen
class Cpu:
    id: int
    package: int
    die: int
    node: int
    threads: CpuSet
    """The hyperthreads of this CPU's core (itself included)."""


class MemoryType(enum.Flag):
    """The kind of memory a NUMA node holds; a Flag, so a request can name several."""

    DRAM = 1
    PMEM = 2
    HBM = 4

    @classmethod
    def parse(cls, text: str) -> MemoryType:
        """``dram,pmem`` (any case) as a mask; InvalidValue naming an unknown word."""
        mask = cls(0)
        for word in text.split(","):
            name = word.strip().upper()
            if name not in cls.__members__:
                raise InvalidValue(f"unknown memory type {word.strip()!r} (dram, pmem or hbm)")
            mask |= cls[name]
        return mask

    def label(self) -> str:
        return ",".join(m.name or "" for m in MemoryType if m in self) or "none"


@attrs.frozen
class NumaNode:
    id: int
    cpus: CpuSet
    memory: int
    """MemTotal in bytes."""
    distances: Mapping[int, int]
    memory_type: MemoryType = MemoryType.DRAM
    """DRAM for nodes with CPUs; a CPU-less node with memory is HBM when smaller than the
    average DRAM node, else PMEM (nri-plugins' sysfs rule: sysfs does not say)."""


@attrs.frozen
class System:
    cpus: Mapping[int, Cpu]
    nodes: Mapping[int, NumaNode]
    isolated: CpuSet
    details: CpuDetails = attrs.field(factory=CpuDetails, eq=False)
    """Caches, frequencies, core kinds: what the CPU allocator ranks CPUs by."""
    host_root: str = attrs.field(default="", eq=False)
    """The prefix its sysfs was read under: device topology is read there too."""

    @property
    def online(self) -> CpuSet:
        return CpuSet(self.cpus)

    def packages(self) -> list[int]:
        return sorted({c.package for c in self.cpus.values()})

    def package_cpus(self, package: int) -> CpuSet:
        return CpuSet(c.id for c in self.cpus.values() if c.package == package)

    def dies(self, package: int) -> list[int]:
        return sorted({c.die for c in self.cpus.values() if c.package == package})

    def die_cpus(self, package: int, die: int) -> CpuSet:
        return CpuSet(c.id for c in self.cpus.values() if (c.package, c.die) == (package, die))

    def nodes_of(self, cpus: CpuSet) -> list[int]:
        """The NUMA nodes that hold any of ``cpus``."""
        return sorted({self.cpus[i].node for i in cpus if i in self.cpus})

    def closest_memory(self, cpus: CpuSet) -> CpuSet:
        """The NUMA nodes with memory nearest to ``cpus`` (their own nodes if those have memory)."""
        own = [n for n in self.nodes_of(cpus) if self.nodes[n].memory > 0]
        if own:
            return CpuSet(own)
        candidates = [n for n in self.nodes.values() if n.memory > 0]
        if not candidates:
            return CpuSet(self.nodes_of(cpus))
        sources = self.nodes_of(cpus)

        def distance(n: NumaNode) -> int:
            return min((self.nodes[s].distances.get(n.id, 255) for s in sources), default=255)

        best = min(distance(n) for n in candidates)
        return CpuSet(n.id for n in candidates if distance(n) == best)

    def core_of(self, cpu: int) -> CpuSet:
        return self.cpus[cpu].threads

    def single_threads(self, cpus: CpuSet) -> CpuSet:
        """One hyperthread (the lowest in ``cpus``) of every core that has CPUs in ``cpus``
        (hide-hyperthreads, in both policies)."""
        return CpuSet({min(self.cpus[c].threads & cpus) for c in cpus})

    def memory_types(self) -> MemoryType:
        """Every memory type some node with memory has."""
        mask = MemoryType(0)
        for n in self.nodes.values():
            if n.memory > 0:
                mask |= n.memory_type
        return mask

    def memory_of_types(self, cpus: CpuSet, types: MemoryType) -> CpuSet:
        """The memory nodes of ``types`` for containers on ``cpus``: the nodes closest to the
        CPUs, widened by the nearest node of each wanted type they lack, then narrowed to the
        nodes of the wanted types (libmem's initial zone). Empty ``types``: closest_memory."""
        zone = set(self.closest_memory(cpus))
        if not types:
            return CpuSet(zone)
        have = MemoryType(0)
        for n in zone:
            have |= self.nodes[n].memory_type
        for t in MemoryType:
            if t & types and not t & have:
                zone |= self._nearest_of_type(zone, t)
        wanted = {n for n in zone if self.nodes[n].memory_type & types}
        return CpuSet(wanted or zone)

    def _nearest_of_type(self, zone: set[int], t: MemoryType) -> set[int]:
        candidates = [
            n
            for n in self.nodes.values()
            if n.memory > 0 and n.memory_type is t and n.id not in zone
        ]
        if not candidates or not zone:
            return set()

        def distance(n: NumaNode) -> int:
            return min(self.nodes[z].distances.get(n.id, 255) for z in zone)

        best = min(distance(n) for n in candidates)
        return {n.id for n in candidates if distance(n) == best}

    def attached_cpu_nodes(self, node: int) -> CpuSet:
        """The CPU nodes a CPU-less memory node belongs with: the DRAM nodes with CPUs at
        the smallest distance from it (its own id for a node with CPUs)."""
        this = self.nodes[node]
        if this.cpus:
            return CpuSet([node])
        near = [n for n in self.nodes.values() if n.cpus and n.memory_type is MemoryType.DRAM]
        if not near:
            return CpuSet()
        best = min(this.distances.get(n.id, 255) for n in near)
        return CpuSet(n.id for n in near if this.distances.get(n.id, 255) == best)


def discover(host_root: str = "") -> System:
    """Read the topology under ``<host_root>/sys``; raise SysfsError if it is not there."""
    sys_dir = Path(host_root or "/") / "sys"
    cpu_dir = sys_dir / "devices/system/cpu"
    online_text = read_attr(cpu_dir / "online")
    if online_text is None:
        raise SysfsError(f"{cpu_dir / 'online'}: cannot read the online CPUs")
    online = _parse(online_text, cpu_dir / "online")
    node_of = _numa_membership(sys_dir / "devices/system/node", online)
    cpus = {i: _read_cpu(cpu_dir / f"cpu{i}", i, node_of.get(i, 0)) for i in online}
    nodes = _read_nodes(sys_dir / "devices/system/node", node_of, online, host_root)
    isolated = _parse(read_attr(cpu_dir / "isolated") or "", cpu_dir / "isolated") & online
    details = read_details(host_root, online)
    system = System(cpus=cpus, nodes=nodes, isolated=isolated, details=details, host_root=host_root)
    log.debug("discovered %d CPUs, %d NUMA nodes", len(cpus), len(nodes))
    return system


def _parse(text: str, path: Path) -> CpuSet:
    try:
        return CpuSet.parse(text)
    except CpuSetError as e:
        raise SysfsError(f"{path}: {e}") from e


def _read_int(path: Path, default: int) -> int:
    text = read_attr(path)
    if text is None:
        return default
    try:
        return int(text)
    except ValueError as e:
        raise SysfsError(f"{path}: {text!r} is not an integer") from e


def _read_cpu(path: Path, cpu: int, node: int) -> Cpu:
    topo = path / "topology"
    siblings_text = read_attr(topo / "thread_siblings_list")
    threads = _parse(siblings_text, topo) if siblings_text else CpuSet([cpu])
    return Cpu(
        id=cpu,
        package=max(_read_int(topo / "physical_package_id", 0), 0),
        die=max(_read_int(topo / "die_id", 0), 0),
        node=node,
        threads=threads | CpuSet([cpu]),
    )


def _node_ids(node_dir: Path) -> list[int]:
    if not node_dir.is_dir():
        return []
    ids = [int(p.name[4:]) for p in node_dir.glob("node*") if p.name[4:].isdigit()]
    return sorted(ids)


def _numa_membership(node_dir: Path, online: CpuSet) -> dict[int, int]:
    membership: dict[int, int] = {}
    for n in _node_ids(node_dir):
        cpulist = node_dir / f"node{n}" / "cpulist"
        for cpu in _parse(read_attr(cpulist) or "", cpulist) & online:
            membership[cpu] = n
    return membership


def _read_nodes(
    node_dir: Path, node_of: Mapping[int, int], online: CpuSet, host_root: str
) -> dict[int, NumaNode]:
    ids = _node_ids(node_dir)
    if not ids:
        # A kernel without NUMA support: everything is one node.
        memory = _memtotal(Path(host_root or "/") / "proc/meminfo")
        return {0: NumaNode(id=0, cpus=online, memory=memory, distances={0: 10})}
    nodes: dict[int, NumaNode] = {}
    for n in ids:
        cpus = CpuSet(c for c, node in node_of.items() if node == n)
        memory = _memtotal(node_dir / f"node{n}" / "meminfo")
        distances = _distances(node_dir / f"node{n}" / "distance", ids, n)
        nodes[n] = NumaNode(id=n, cpus=cpus, memory=memory, distances=distances)
    return _classify(nodes)


def _classify(nodes: dict[int, NumaNode]) -> dict[int, NumaNode]:
    """Give CPU-less nodes with memory their type: HBM below the average DRAM node, PMEM at
    or above it. Nodes with CPUs are DRAM."""
    special = [n for n in nodes.values() if not n.cpus and n.memory > 0]
    dram = [n.memory for n in nodes.values() if n.cpus and n.memory > 0]
    if not special or not dram:
        return nodes
    average = sum(dram) // len(dram)
    out = dict(nodes)
    for n in special:
        kind = MemoryType.HBM if n.memory < average else MemoryType.PMEM
        out[n.id] = attrs.evolve(n, memory_type=kind)
        log.info("NUMA node %d: %s memory (%d bytes, no CPUs)", n.id, kind.label(), n.memory)
    return out


def _memtotal(path: Path) -> int:
    match = _MEMTOTAL.search(read_attr(path) or "")
    return int(match.group(1)) * 1024 if match else 0


def _distances(path: Path, ids: list[int], own: int) -> dict[int, int]:
    text = read_attr(path)
    if not text:
        return {n: (10 if n == own else 20) for n in ids}
    values = text.split()
    if len(values) != len(ids) or not all(v.isdigit() for v in values):
        raise SysfsError(f"{path}: expected {len(ids)} distances, got {text!r}")
    return dict(zip(ids, (int(v) for v in values), strict=True))
