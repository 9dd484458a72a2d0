"""The guest is the machine the replays assume: what its kernel shows, read by the daemon's
own discovery in the guest, equals what the replays write as a synthetic sysfs (memory
aside: the kernel keeps some of each node for itself). And the basic contract of the real
node: no network device, cgroup v2 with cpusets, containerd 2.4 answering CRI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nri_resmgr.sysfs import System, discover
from tests.node.conftest import CORE, N6, boot
from tests.node.payload import CONTAINERD_VERSION
from tests.node.session import Nodes
from tests.policies.replay.vm import VmTopology, write_vm_sysfs
from tests.policies.topology_aware_e2e.topologies import N4C16, N6_HBM_CXL

SUMMARY = """
import json, sys
from nri_resmgr.sysfs import discover
s = discover("")
json.dump({
  "cpus": {i: [c.package, c.die, c.node, str(c.threads)] for i, c in s.cpus.items()},
  "nodes": {n: [str(v.cpus), v.memory, dict(v.distances), v.memory_type.label()]
            for n, v in s.nodes.items()},
}, sys.stdout)
"""
MIB = 1 << 20


def summary(system: System) -> dict[str, Any]:
    doc = {
        "cpus": {i: [c.package, c.die, c.node, str(c.threads)] for i, c in system.cpus.items()},
        "nodes": {n: [str(v.cpus), v.memory, dict(v.distances), v.memory_type.label()]
                  for n, v in system.nodes.items()},
    }  # fmt: skip
    parsed: dict[str, Any] = json.loads(json.dumps(doc))
    return parsed


def check_machine(nodes: Nodes, topology: VmTopology, name: str, tmp_path: Path) -> None:
    session = boot(nodes, topology, name)
    env = {"PYTHONPATH": "/opt/nri-resmgr/site"}
    guest = json.loads(session.guest.run("python3", "-c", SUMMARY, env=env).out)
    replay = summary(discover(str(write_vm_sysfs(tmp_path, topology))))
    assert guest["cpus"] == replay["cpus"]
    for n, (cpus, memory, distances, kind) in replay["nodes"].items():
        g_cpus, g_memory, g_distances, g_kind = guest["nodes"][n]
        assert (g_cpus, g_distances, g_kind) == (cpus, distances, kind), f"node{n}"
        # MemTotal: what the firmware and the kernel leave of the node's memory.
        assert memory - 256 * MIB < g_memory <= memory, f"node{n}: {g_memory} of {memory}"
    assert guest["nodes"].keys() == replay["nodes"].keys()


@CORE
def test_the_n4c16_guest_kernel_shows_the_replays_machine(nodes: Nodes, tmp_path: Path) -> None:
    check_machine(nodes, N4C16, "n4c16", tmp_path)


@CORE
def test_the_guest_has_no_network_device_cgroup2_cpusets_and_containerd_2_4(
    nodes: Nodes,
) -> None:
    session = boot(nodes, N4C16, "n4c16")
    links = session.guest.run("ip", "-o", "link").out.splitlines()
    assert [line.split(":")[1].strip() for line in links] == ["lo"]
    controllers = session.guest.read("/sys/fs/cgroup/cgroup.subtree_control").split()
    assert {"cpuset", "cpu", "memory"} <= set(controllers)
    assert session.node.cri("version") == {"runtime": "containerd", "version": CONTAINERD_VERSION}
    # crictl is there too, for a person at the guest's console. Its 2 s default timeout
    # flakes under TCG: a bound in minutes, as for every wait here.
    crictl = session.guest.run("/usr/local/bin/crictl", "--timeout", "240s", "version",
                               timeout=300).out  # fmt: skip
    assert f"RuntimeVersion:  {CONTAINERD_VERSION}" in crictl


@N6
def test_the_hbm_pmem_guest_kernel_shows_the_replays_machine(nodes: Nodes, tmp_path: Path) -> None:
    check_machine(nodes, N6_HBM_CXL, "n6-hbm-cxl", tmp_path)
