"""Synthetic sysfs trees: write a machine layout under a directory and use it as host_root.

Used by the tests and by `nri-resmgr demo` to show placement on machines we do not have.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import attrs

from nri_resmgr.cpuset import CpuSet

GIB = 1 << 30


@attrs.frozen
class MemoryNode:
    """A CPU-less NUMA node (HBM, PMEM, CXL memory), numbered after the CPU nodes."""

    memory: int
    distances: Mapping[int, int] = attrs.field(factory=dict)
    """Distances to lower-numbered nodes (symmetric, as upstream's e2e ``node-dist``);
    missing pairs are 21."""


@attrs.frozen
class Layout:
    """A regular machine: packages x dies x NUMA nodes x cores x threads.

    CPU ids are numbered core by core (a core's threads are adjacent) unless ``cpu_ids`` gives
    the ids to use, in the same order, for sparse numbering.
    """

    packages: int = 1
    dies: int = 1
    nodes_per_die: int = 1
    cores_per_node: int = 4
    threads: int = 1
    isolated: str = ""
    node_memory: int = 2 * GIB
    memoryless_nodes: tuple[int, ...] = ()
    cpu_ids: tuple[int, ...] = ()
    memory_nodes: tuple[MemoryNode, ...] = ()

    @property
    def cpu_count(self) -> int:
        return self.packages * self.dies * self.nodes_per_die * self.cores_per_node * self.threads


ONE_SOCKET_4CPU = Layout()
N4C16 = Layout(packages=2, nodes_per_die=2, cores_per_node=2, threads=2)
"""The e2e ``n4c16`` VM: 2 packages x 2 NUMA nodes x 2 cores x 2 threads."""
FOUR_NUMA_DIES = Layout(packages=1, dies=2, nodes_per_die=2, cores_per_node=2, threads=2)
N4C16_ISOLATED = attrs.evolve(N4C16, isolated="14-15")
SPARSE = Layout(
    packages=1, nodes_per_die=2, cores_per_node=2, threads=2, cpu_ids=(0, 1, 4, 5, 64, 65, 66, 67)
)

N6_HBM_CXL = Layout(
    packages=2,
    cores_per_node=2,
    threads=2,
    memory_nodes=(
        MemoryNode(GIB, {0: 15, 1: 30}),
        MemoryNode(GIB, {0: 30, 1: 15, 2: 35}),
        MemoryNode(4 * GIB, {0: 60, 1: 70, 2: 62, 3: 72}),
        MemoryNode(4 * GIB, {0: 70, 1: 60, 2: 72, 3: 62, 4: 75}),
    ),
)
"""The e2e ``n6-hbm-cxl`` VM (``topology.var.json``): two sockets of one 2G node with 2 cores
x 2 threads, a 1G CPU-less node near each (HBM: smaller than the DRAM nodes) and a 4G one
near each (PMEM)."""

TOPOLOGIES = {
    "one-socket-4cpu": ONE_SOCKET_4CPU,
    "n4c16": N4C16,
    "four-numa-dies": FOUR_NUMA_DIES,
    "n4c16-isolated": N4C16_ISOLATED,
    "sparse": SPARSE,
    "n6-hbm-cxl": N6_HBM_CXL,
}


def write_sysfs(root: Path, layout: Layout) -> Path:
    """Write ``layout`` as ``root/sys/...``; return ``root`` (the host_root to use)."""
    ids = list(layout.cpu_ids) or list(range(layout.cpu_count))
    if len(ids) != layout.cpu_count:
        raise ValueError(f"cpu_ids has {len(ids)} ids, layout needs {layout.cpu_count}")
    cpu_dir = root / "sys/devices/system/cpu"
    node_dir = root / "sys/devices/system/node"
    cpu_dir.mkdir(parents=True, exist_ok=True)
    node_cpus: dict[int, list[int]] = {}
    node_package: dict[int, int] = {}
    position = 0
    for pkg in range(layout.packages):
        for die in range(layout.dies):
            for n in range(layout.nodes_per_die):
                node = (pkg * layout.dies + die) * layout.nodes_per_die + n
                node_package[node] = pkg
                node_cpus[node] = []
                for core in range(layout.cores_per_node):
                    threads = ids[position : position + layout.threads]
                    position += layout.threads
                    core_id = (die * layout.nodes_per_die + n) * layout.cores_per_node + core
                    for cpu in threads:
                        _write_cpu(cpu_dir / f"cpu{cpu}", pkg, die, core_id, CpuSet(threads))
                    node_cpus[node].extend(threads)
    (cpu_dir / "online").write_text(f"{CpuSet(ids)}\n")
    (cpu_dir / "isolated").write_text(f"{layout.isolated}\n")
    distances = _distance_matrix(layout, node_package)
    for node, cpus in node_cpus.items():
        memory = 0 if node in layout.memoryless_nodes else layout.node_memory
        _write_node(node_dir / f"node{node}", node, cpus, memory, distances[node])
    for i, extra in enumerate(layout.memory_nodes):
        node = len(node_cpus) + i
        _write_node(node_dir / f"node{node}", node, [], extra.memory, distances[node])
    (node_dir / "online").write_text(f"{CpuSet(range(len(distances)))}\n")
    return root


def _distance_matrix(layout: Layout, node_package: dict[int, int]) -> list[list[int]]:
    """CPU nodes: 10 to self, 12 within a package, 21 across; memory nodes as declared."""
    count = len(node_package) + len(layout.memory_nodes)
    matrix = [[10 if a == b else 21 for b in range(count)] for a in range(count)]
    for a, pa in node_package.items():
        for b, pb in node_package.items():
            if a != b and pa == pb:
                matrix[a][b] = 12
    for i, extra in enumerate(layout.memory_nodes):
        node = len(node_package) + i
        for other, d in extra.distances.items():
            if not 0 <= other < node:
                raise ValueError(f"memory node {node}: distance to node {other} is not earlier")
            matrix[node][other] = matrix[other][node] = d
    return matrix


def _write_cpu(path: Path, pkg: int, die: int, core: int, threads: CpuSet) -> None:
    topo = path / "topology"
    topo.mkdir(parents=True, exist_ok=True)
    (topo / "physical_package_id").write_text(f"{pkg}\n")
    (topo / "die_id").write_text(f"{die}\n")
    (topo / "core_id").write_text(f"{core}\n")
    (topo / "thread_siblings_list").write_text(f"{threads}\n")


def _write_node(path: Path, node: int, cpus: list[int], memory: int, distances: list[int]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "cpulist").write_text(f"{CpuSet(cpus)}\n")
    (path / "meminfo").write_text(
        f"Node {node} MemTotal:       {memory // 1024} kB\nNode {node} MemFree:  0 kB\n"
    )
    (path / "distance").write_text(" ".join(map(str, distances)) + "\n")
