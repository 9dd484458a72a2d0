"""nri-plugins' CPU allocator rules (``pkg/cpuallocator``): which CPUs of a free set to give
to a request, by packages, cache groups, cores and threads, with a CPU priority preference.

Topology-aware uses it for reserved and exclusive CPUs, as upstream does. Balloons keeps
its own CPU tree (``balloons/cputree.py``), which picks leaves with ``resmgr/cpualloc.py``.
"""

from nri_resmgr.resmgr.cpuallocator.allocator import allocate_cpus, release_cpus
from nri_resmgr.resmgr.cpuallocator.priority import Priority, discover_priorities
from nri_resmgr.resmgr.cpuallocator.topology import CacheGroup, Topology, topology_of

__all__ = [
    "CacheGroup",
    "Priority",
    "Topology",
    "allocate_cpus",
    "discover_priorities",
    "release_cpus",
    "topology_of",
]
