"""Synthetic sysfs trees for tests (the writer lives in the package, for the demo too)."""

from nri_resmgr.sim.synthetic import (
    FOUR_NUMA_DIES,
    GIB,
    N4C16,
    N4C16_ISOLATED,
    N6_HBM_CXL,
    ONE_SOCKET_4CPU,
    SPARSE,
    TOPOLOGIES,
    Layout,
    MemoryNode,
    write_sysfs,
)

__all__ = [
    "FOUR_NUMA_DIES",
    "GIB",
    "N4C16",
    "N4C16_ISOLATED",
    "N6_HBM_CXL",
    "ONE_SOCKET_4CPU",
    "SPARSE",
    "TOPOLOGIES",
    "Layout",
    "MemoryNode",
    "write_sysfs",
]
