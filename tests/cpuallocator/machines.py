"""Synthetic machines for the CPU allocator tests, each exercising one upstream rule."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import attrs

from nri_resmgr.sim.synthetic import FOUR_NUMA_DIES, N4C16, SPARSE, Layout, write_sysfs
from nri_resmgr.sim.synthetic_cpu import (
    CacheSpec,
    link_numa_nodes,
    parse_cache_overrides,
    write_caches,
    write_cluster_ids,
    write_core_kinds,
    write_cpufreq,
)

N4C128 = Layout(packages=2, nodes_per_die=2, cores_per_node=16, threads=2)
"""The e2e n4c128 VM (as simulate's machine table has it)."""

TEST19_CACHES = """[
  {"cpusets": ["0-7","64-71" ], "level": 3, "size": "16M"},
  {"cpusets": ["8-15","72-79" ], "level": 3, "size": "16M"},
  {"cpusets": ["48-55","112-119" ], "level": 3, "size": "16M"},
  {"cpusets": ["56-63","120-127" ], "level": 3, "size": "16M"},
  {"cpusets": ["16-23","80-87" ], "level": 3, "size": "16M"},
  {"cpusets": ["24-31","88-95" ], "level": 3, "size": "16M"},
  {"cpusets": ["32-39","96-103" ], "level": 3, "size": "16M"},
  {"cpusets": ["40-47","104-111" ], "level": 3, "size": "16M"},
  {"cpusets": ["0-63"], "level": 2, "size": "4M"},
  {"cpusets": ["64-127"], "level": 2, "size": "4M"},
  {"cpusets": ["0-63"], "level": 1, "size": "1M", "kind": "d"},
  {"cpusets": ["0-63"], "level": 1, "size": "1M", "kind": "i"},
  {"cpusets": ["64-127"], "level": 1, "size": "128k", "kind": "d"},
  {"cpusets": ["64-127"], "level": 1, "size": "128k", "kind": "i"}
]"""
"""n4c128/test19-cacheclusters' OVERRIDE_SYS_CACHES: 16 L3 caches of 8 CPUs."""

EPYC = Layout(packages=1, nodes_per_die=1, cores_per_node=32, threads=2)


def _epyc_caches(root: Path) -> None:
    # Four CCXs of 8 cores (16 threads) share an L3; each core has its own L2 and L1s.
    l3 = CacheSpec(3, tuple(f"{i * 16}-{i * 16 + 15}" for i in range(4)))
    per_core = tuple(f"{2 * c}-{2 * c + 1}" for c in range(32))
    l1 = [CacheSpec(1, per_core, "Data", "32K"), CacheSpec(1, per_core, "Instruction", "32K")]
    write_caches(root, [l3, CacheSpec(2, per_core, size="1M"), *l1])


def _one_core_kind(root: Path, kind: str, cpus: str) -> None:
    path = root / "sys/devices" / kind
    path.mkdir(parents=True, exist_ok=True)
    (path / "cpus").write_text(f"{cpus}\n")


def _hybrid_base_frequency(root: Path) -> None:
    # E-cores on node 3, and a fast and a slow half in each package: both sources at once.
    write_core_kinds(root, "0-11", "12-15")
    write_cpufreq(root, {"0-3,8-11": 3000000, "4-7,12-15": 2000000})


def _hybrid_clusters(root: Path) -> None:
    # Intel hybrid-like: every P-core its own cluster, E-cores in modules of four.
    write_core_kinds(root, "0-7", "8-15")
    write_cluster_ids(root, {**{str(c): c for c in range(8)}, "8-11": 8, "12-15": 12})


def _hybrid_clusters_2pkg(root: Path) -> None:
    # Two such packages: four P-cores and two E-modules each.
    write_core_kinds(root, "0-3,12-15", "4-11,16-23")
    ids = {str(c): c % 12 for c in (*range(4), *range(12, 16))}
    write_cluster_ids(root, {**ids, "4-7": 4, "8-11": 8, "16-19": 4, "20-23": 8})


@attrs.frozen
class Machine:
    name: str
    layout: Layout
    extras: Callable[[Path], None] = lambda root: None
    requests: int = 250
    """How many random requests the Go parity test asks (Go's allocator is slow at 4k CPUs)."""
    go_env: Mapping[str, str] = attrs.field(factory=dict)
    """Environment of the Go allocator: pkg/sysfs overrides standing for what ``extras``
    writes where upstream reads that sysfs differently."""

    def write(self, root: Path) -> Path:
        write_sysfs(root, self.layout)
        self.extras(root)
        link_numa_nodes(root)
        return root


MACHINES = [
    Machine("n4c16", N4C16),
    Machine("four-numa-dies", FOUR_NUMA_DIES),
    Machine("sparse", SPARSE),
    Machine("n4c128-l3", N4C128, lambda r: write_caches(r, parse_cache_overrides(TEST19_CACHES))),
    Machine("epyc-ccx", EPYC, _epyc_caches),
    Machine(
        "n4c16-base-frequency",
        N4C16,
        lambda r: write_cpufreq(r, {"0-3,8-11": 3000000, "4-7,12-15": 2000000}),
    ),
    Machine(
        "n4c16-epp",
        N4C16,
        lambda r: write_cpufreq(r, epp={"0-5,8-9": "performance", "6-7,10-15": "power"}),
    ),
    Machine("s8c4k", Layout(packages=8, cores_per_node=512, threads=1), requests=4),
    Machine(
        "hybrid",
        Layout(cores_per_node=12, threads=1),
        lambda r: write_core_kinds(r, "0-7", "8-11"),
    ),
    # n4c16/test08-cpuprio-allocation: one core kind given, the rest is the other kind.
    # Upstream's sysfs discovery refuses a lone cpu_atom/cpus (it takes every CPU as a
    # P-core when cpu_core/cpus is missing, then finds the kinds overlapping); its
    # OVERRIDE_SYS_ATOM_CPUS completes it as nri-resmgr completes the lone sysfs file.
    Machine(
        "n4c16-atom-only",
        N4C16,
        lambda r: _one_core_kind(r, "cpu_atom", "4-5"),
        go_env={"OVERRIDE_SYS_ATOM_CPUS": "4-5"},
    ),
    Machine("hybrid-clusters", Layout(cores_per_node=16, threads=1), _hybrid_clusters),
    Machine(
        "hybrid-clusters-2pkg",
        Layout(packages=2, cores_per_node=12, threads=1),
        _hybrid_clusters_2pkg,
    ),
    Machine("n4c16-core-only", N4C16, lambda r: _one_core_kind(r, "cpu_core", "0-1,4-5")),
    Machine(
        "n4c16-hybrid-base-frequency",
        N4C16,
        _hybrid_base_frequency,
    ),
]
