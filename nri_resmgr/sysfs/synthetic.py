"""Synthetic sysfs trees: write a machine layout under a directory and use it as host_root.

Used by the tests and by `nri-resmgr demo` to show placement on machines we do not have.
"""

from __future__ import annotations

from pathlib import Path

import attrs

from nri_resmgr.resmgr.cpuset import CpuSet

GIB = 1 << 30


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

TOPOLOGIES = {
    "one-socket-4cpu": ONE_SOCKET_4CPU,
    "n4c16": N4C16,
    "four-numa-dies": FOUR_NUMA_DIES,
    "n4c16-isolated": N4C16_ISOLATED,
    "sparse": SPARSE,
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
    for node, cpus in node_cpus.items():
        _write_node(node_dir / f"node{node}", node, cpus, layout, node_package)
    (node_dir / "online").write_text(f"{CpuSet(node_cpus)}\n")
    return root


def _write_cpu(path: Path, pkg: int, die: int, core: int, threads: CpuSet) -> None:
    topo = path / "topology"
    topo.mkdir(parents=True, exist_ok=True)
    (topo / "physical_package_id").write_text(f"{pkg}\n")
    (topo / "die_id").write_text(f"{die}\n")
    (topo / "core_id").write_text(f"{core}\n")
    (topo / "thread_siblings_list").write_text(f"{threads}\n")


def _write_node(
    path: Path, node: int, cpus: list[int], layout: Layout, node_package: dict[int, int]
) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "cpulist").write_text(f"{CpuSet(cpus)}\n")
    memory = 0 if node in layout.memoryless_nodes else layout.node_memory
    (path / "meminfo").write_text(
        f"Node {node} MemTotal:       {memory // 1024} kB\nNode {node} MemFree:  0 kB\n"
    )
    distances = []
    for other, pkg in sorted(node_package.items()):
        if other == node:
            distances.append(10)
        elif pkg == node_package[node]:
            distances.append(12)
        else:
            distances.append(21)
    (path / "distance").write_text(" ".join(map(str, distances)) + "\n")
