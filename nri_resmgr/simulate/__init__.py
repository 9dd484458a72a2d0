"""``nri-resmgr simulate``: a workload through a policy on a chosen machine, before rollout.

``workload`` reads Pod manifests and later steps; ``kubelet`` turns a Pod into what NRI
shows a plugin; ``machine`` and ``snapshot`` give the topology to run on; ``runner`` drives
the simulated runtime; ``report`` and ``plot`` show the result.
"""

from nri_resmgr.simulate.machine import Machine, open_machine
from nri_resmgr.simulate.records import ContainerRecord, SimulationResult, Status
from nri_resmgr.simulate.runner import simulate
from nri_resmgr.simulate.workload import Workload, parse_workload

__all__ = [
    "ContainerRecord",
    "Machine",
    "SimulationResult",
    "Status",
    "Workload",
    "open_machine",
    "parse_workload",
    "simulate",
]
