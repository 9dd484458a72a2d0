"""nri-plugins' balloons e2e scenario s8c4k/test01-sparse-4kcpus: 8 packages of 512
single-thread cores (4096 CPU ids), of which only 0-2, 511, 1535 and 4095 are online
(three present at boot, three hot-plugged). Its NodeResourceTopology checks are left out:
the project exports no NodeResourceTopology."""

from __future__ import annotations

from pathlib import Path

from nri_resmgr.cpuset import CpuSet
from tests.policies.balloons.scenario import Scenario

ANN = "balloon.balloons.resource-policy.nri.io/container"
ONLINE = [0, 1, 2, 511, 1535, 4095]


def write_sparse_sysfs(root: Path) -> None:
    cpu_dir = root / "sys/devices/system/cpu"
    node_dir = root / "sys/devices/system/node"
    for cpu in ONLINE:
        topo = cpu_dir / f"cpu{cpu}/topology"
        topo.mkdir(parents=True)
        (topo / "physical_package_id").write_text(f"{cpu // 512}\n")
        (topo / "die_id").write_text("0\n")
        (topo / "core_id").write_text(f"{cpu % 512}\n")
        (topo / "thread_siblings_list").write_text(f"{cpu}\n")
    (cpu_dir / "online").write_text(f"{CpuSet(ONLINE)}\n")
    (cpu_dir / "isolated").write_text("\n")
    for node in range(8):
        d = node_dir / f"node{node}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(f"{CpuSet(c for c in ONLINE if c // 512 == node)}\n")
        (d / "meminfo").write_text(f"Node {node} MemTotal:       262144 kB\n")
        (d / "distance").write_text(" ".join("10" if n == node else "20" for n in range(8)))
    (node_dir / "online").write_text("0-7\n")


SPARSE_CFG = {
    "pinCPU": True,
    "pinMemory": False,
    "balloonTypes": [
        {"name": "pkg0", "minCPUs": 1, "maxCPUs": 1,
         "preferCloseToDevices": ["/sys/devices/system/node/node0"],
         "shareIdleCPUsInSame": "package"},
        {"name": "pkg2", "minCPUs": 1, "maxCPUs": 1,
         "preferCloseToDevices": ["/sys/devices/system/node/node2"]},
        {"name": "pkg7", "minCPUs": 1, "maxCPUs": 1, "minBalloons": 1,
         "preferCloseToDevices": ["/sys/devices/system/node/node7"]},
    ],
    "availableResources": {"cpu": "cpuset:0-4095"},
    "reservedResources": {"cpu": "cpuset:1"},
    "instrumentation": {"httpEndpoint": ":8891"},
    "log": {"debug": ["policy"], "source": True, "klog": {"skip_headers": True}},
}  # fmt: skip


def test01_sparse_4kcpus(tmp_path: Path) -> None:
    write_sparse_sysfs(tmp_path)
    s = Scenario(tmp_path, SPARSE_CFG, write=False)
    pkg7 = s.policy.state.by_name("pkg7[0]")
    assert pkg7 is not None and pkg7.cpus == CpuSet([4095])  # upstream: NRT cpuset "4095"
    annotations = {f"{ANN}.pod0c0": "pkg0", f"{ANN}.pod0c1": "pkg2", f"{ANN}.pod0c2": "pkg7"}
    # Upstream uses its besteffort pod template: no resources (CPUREQ is ignored there).
    s.create(contcount=3, annotations=annotations, cpureq="")
    c = s.cpus
    assert c["pod0c0"] == CpuSet([0, 2, 511])
    assert c["pod0c1"] == CpuSet([1535]) and c["pod0c2"] == CpuSet([4095])
