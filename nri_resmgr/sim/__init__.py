"""Everything that simulates, apart from the daemon (the daemon never imports this package).

- the runtime simulator: ``runtime`` (a container runtime speaking NRI's runtime side on a
  unix socket) and ``connection`` (its end of one plugin connection);
- synthetic machines: ``synthetic`` and ``synthetic_cpu`` write sysfs trees to run on;
- ``nri-resmgr demo``: ``demo`` (through the real NRI service) and ``demo_workload`` (the
  demo's pods, and the same workload through a policy alone);
- ``nri-resmgr simulate`` and ``snapshot-topology``: ``workload`` reads Pod manifests and
  later steps; ``kubelet`` turns a Pod into what NRI shows a plugin; ``machine`` and
  ``snapshot`` give the topology to run on; ``runner`` drives the simulated runtime;
  ``records``, ``report`` and ``plot`` show the result; ``command`` is the command line.
"""
