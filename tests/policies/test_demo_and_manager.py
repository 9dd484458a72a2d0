from __future__ import annotations

from pathlib import Path

import pytest

from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from nri_resmgr.resmgr.manager import ResourceManager
from nri_resmgr.resmgr.policy import PolicyEnv
from nri_resmgr.sim.demo_workload import demo
from tests.policies.workload import besteffort, guaranteed, running, topology_spec
from tests.sysfs.fakesys import N4C16, write_sysfs


@pytest.mark.parametrize("policy_name", ["topology-aware", "balloons"])
@pytest.mark.parametrize("machine", ["n4c16", "host"])
def test_demo_renders_every_container(policy_name: str, machine: str) -> None:
    text = demo(policy_name, machine)
    assert text.splitlines()[0].startswith(f"{policy_name} on ")
    for name in ("kube-system/coredns", "default/db", "default/batch"):
        assert name in text


def test_demo_n4c16_topology_aware_placement() -> None:
    rows = {line.split()[0]: line.split()[3] for line in demo().splitlines()[2:]}
    assert rows["kube-system/coredns"] == "0"
    assert rows["default/db"] == "4-5"


def test_demo_unknown_machine() -> None:
    with pytest.raises(ValueError, match="unknown machine 'mars'"):
        demo("topology-aware", "mars")


async def test_through_the_manager(tmp_path: Path) -> None:
    write_sysfs(tmp_path, N4C16)
    env = PolicyEnv(host_root=str(tmp_path))
    spec = topology_spec()
    manager = ResourceManager(TopologyAwarePolicy(), spec, env)
    be_pod, be = besteffort("be")
    async with manager.lock:
        adjustment, _ = manager.create_container(be_pod, be)
    g_pod, g = guaranteed("g", 1000)
    async with manager.lock:
        g_adjustment, updates = manager.create_container(g_pod, g)
    assert (adjustment.cpuset_cpus, g_adjustment.cpuset_cpus) == ("4-7", "8")
    assert updates == []
    # A restarted daemon: a fresh manager synchronizes and keeps everything in place.
    again = ResourceManager(TopologyAwarePolicy(), spec, env)
    async with again.lock:
        synced = again.synchronize(
            [be_pod, g_pod],
            [running(be, "4-7", "1"), running(g, g_adjustment.cpuset_cpus, "2")],
        )
    assert synced == []
    # One device per allocatable CPU (cpu0 is reserved).
    assert sorted(d.cpus[0] for d in await again.dra_devices()) == list(range(1, 16))
