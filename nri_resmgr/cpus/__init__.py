"""Picking CPUs out of a free set, for the policies.

This package's face is nri-plugins' CPU allocator rules (``pkg/cpuallocator``: ``allocator``,
``clusters``, ``priority``, ``topology``): which CPUs of a free set to give to a request, by
packages, cache groups, cores and threads, with a CPU priority preference. Topology-aware
uses it for reserved and exclusive CPUs, as upstream does. ``tight`` is the simpler picker
(tightest NUMA node, die or package; idle cores first): balloons keeps its own CPU tree
(``balloons/cputree.py``), which picks leaves with it.
"""

from nri_resmgr.cpus.allocator import allocate_cpus, release_cpus
from nri_resmgr.cpus.priority import Priority, discover_priorities
from nri_resmgr.cpus.topology import CacheGroup, Topology, topology_of

__all__ = [
    "CacheGroup",
    "Priority",
    "Topology",
    "allocate_cpus",
    "discover_priorities",
    "release_cpus",
    "topology_of",
]
