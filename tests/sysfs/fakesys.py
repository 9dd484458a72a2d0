"""Synthetic sysfs trees for tests (the writer lives in the package, for the demo too)."""

from nri_resmgr.sysfs.synthetic import (
    FOUR_NUMA_DIES,
    GIB,
    N4C16,
    N4C16_ISOLATED,
    ONE_SOCKET_4CPU,
    SPARSE,
    TOPOLOGIES,
    Layout,
    write_sysfs,
)

__all__ = [
    "FOUR_NUMA_DIES",
    "GIB",
    "N4C16",
    "N4C16_ISOLATED",
    "ONE_SOCKET_4CPU",
    "SPARSE",
    "TOPOLOGIES",
    "Layout",
    "write_sysfs",
]
