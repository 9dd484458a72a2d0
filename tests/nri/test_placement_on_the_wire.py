"""Issue 12, defect 1, where it showed: the runtime side of NRI (the in-repo simulator, which
applies replies as containerd does) must hold a non-empty cpuset for every container.

An empty cpuset string is dropped by the encoder, and the runtime reads the missing field as
"no change": the container then runs on every CPU, reserved and exclusive ones included.
"""

from __future__ import annotations

from pathlib import Path

import trio

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.nri import convert
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from nri_resmgr.resmgr.manager import ResourceManager
from nri_resmgr.resmgr.policy import PolicyEnv
from nri_resmgr.sim.runtime import Simulator
from nri_resmgr.sim.synthetic import Layout, write_sysfs
from tests.nri.helpers import running_service
from tests.policies.workload import besteffort, guaranteed, topology_spec

GUARD = 10  # a hang guard only


async def test_a_one_cpu_guaranteed_pod_on_two_cpus_leaves_besteffort_pinned(
    sock_path: str, tmp_path: Path
) -> None:
    write_sysfs(tmp_path, Layout(cores_per_node=2))
    manager = ResourceManager(
        TopologyAwarePolicy(), topology_spec(reserved="750m"), PolicyEnv(host_root=str(tmp_path))
    )
    made = [guaranteed("g", 1000), besteffort("be")]
    with trio.fail_after(GUARD):
        async with Simulator.listen(sock_path) as sim, running_service(manager, sock_path):
            await sim.wait_plugin()
            for pod, ctr in made:
                p, c = convert.pod_to_proto(pod), convert.container_to_proto(ctr)
                await sim.run_pod_sandbox(p)
                await sim.create_container(p, c)
            held = {cid: c.linux.resources.cpu.cpus for cid, c in sim.containers.items()}
    assert all(held.values()), f"unpinned containers in the runtime: {held}"
    # CPU 0 is reserved; the one other CPU cannot be exclusive while it is the pool's last.
    assert {CpuSet.parse(v) for v in held.values()} == {CpuSet.parse("1")}
