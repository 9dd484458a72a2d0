"""The topology-aware suite's VMs (``<topology>/topology.var.json`` upstream)."""

from __future__ import annotations

from tests.policies.replay.vm import vm_topology

N4C16 = vm_topology([{"mem": "2G", "cores": 2, "nodes": 2, "packages": 2}])
N4C128 = vm_topology([{"mem": "2G", "cores": 16, "nodes": 2, "packages": 2}])
S8C4K = vm_topology([{"mem": "2G", "threads": 1, "cores": 512, "packages": 8}])
S8C4K_ONLINE = (0, 1, 2, 511, 1535, 4095)
"""Three CPUs present at boot (``cpus-present: 3``), 511, 1535 and 4095 hot-plugged by the
test before the policy starts."""
N6_HBM_CXL = vm_topology(
    [
        {"mem": "2G", "threads": 2, "cores": 2, "nodes": 1, "packages": 2},
        {"mem": "1G", "node-dist": {"0": 15, "1": 30, "2": 10, "3": 35}},
        {"mem": "1G", "node-dist": {"0": 30, "1": 15, "2": 35, "3": 10}},
        {"mem": "4G", "node-dist": {"0": 60, "1": 70, "2": 62, "3": 72, "4": 10, "5": 75}},
        {"mem": "4G", "node-dist": {"0": 70, "1": 60, "2": 72, "3": 62, "4": 75, "5": 10}},
    ]
)
# n6-hbm-cxl/py_consts.var.py
N6_CONSTS = {"dram0": "node0", "dram1": "node1", "hbm0": "node2", "hbm1": "node3",
             "pmem0": "node4", "pmem1": "node5"}  # fmt: skip
