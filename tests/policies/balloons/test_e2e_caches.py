"""nri-plugins' balloons e2e scenarios that depend on the L2 cache layout (test13 cache
clusters, test15 load classes). Upstream's VM fakes its caches (OVERRIDE_SYS_CACHES); here
the same layout is written into the synthetic sysfs."""

from __future__ import annotations

from pathlib import Path

from nri_resmgr.cpuset import CpuSet
from tests.policies.balloons.scenario import Scenario, disjoint
from tests.sysfs.fakesys import N4C16, write_sysfs

ANN = "balloon.balloons.resource-policy.nri.io"


def write_l2(root: Path, groups: list[str]) -> None:
    for group in groups:
        cpus = CpuSet.parse(group)
        for cpu in cpus:
            index = root / f"sys/devices/system/cpu/cpu{cpu}/cache/index2"
            index.mkdir(parents=True, exist_ok=True)
            (index / "level").write_text("2\n")
            (index / "type").write_text("Unified\n")
            (index / "shared_cpu_list").write_text(f"{cpus}\n")


L2_4CPU = ["0-3", "4-7", "8-11", "12-15"]
L2_2CPU = ["0-1", "2-3", "4-5", "6-7", "8-9", "10-11", "12-13", "14-15"]


def _scenario(tmp_path: Path, l2: list[str], cfg: dict[str, object]) -> Scenario:
    write_sysfs(tmp_path, N4C16)
    write_l2(tmp_path, l2)
    return Scenario(tmp_path, cfg, write=False)


def _nodes(s: Scenario, name: str) -> set[int]:
    return {s.system.cpus[c].node for c in s.cpus[name]}


def _packages(s: Scenario, name: str) -> set[int]:
    return {s.system.cpus[c].package for c in s.cpus[name]}


def _cores(s: Scenario, name: str) -> set[int]:
    return {min(s.system.cpus[c].threads) for c in s.cpus[name]}


CACHE_CFG = {
    "allocatorTopologyBalancing": True,
    "reservedResources": {"cpu": "750m"},
    "pinCPU": True,
    "pinMemory": True,
    "balloonTypes": [
        {"name": "l2burst", "minCPUs": 1, "maxCPUs": 4, "shareIdleCPUsInSame": "l2cache",
         "preferSpreadingPods": True, "preferNewBalloons": True},
        {"name": "l2pack", "allocatorTopologyBalancing": False, "shareIdleCPUsInSame": "l2cache",
         "maxCPUs": 1},
    ],
    "log": {"debug": ["policy"]},
}  # fmt: skip
G = {"memreq": "100M", "memlim": "100M"}


def test13_cacheclusters_4cpu(tmp_path: Path) -> None:
    s = _scenario(tmp_path, L2_4CPU, CACHE_CFG)
    # The reserved balloon's size below depends on the VM's own kube-system pods.
    s.control_plane()
    burst, pack = {ANN: "l2burst"}, {ANN: "l2pack"}
    s.create(contcount=3, annotations=burst, cpureq="1500m", cpulim="1500m", **G)
    c = s.cpus
    assert len(c["pod0c0"]) == 4 and len(c["pod0c1"]) == 4
    assert disjoint(*(CpuSet(_nodes(s, f"pod0c{i}")) for i in range(3)))
    s.create(annotations=burst, cpureq="2", cpulim="2", **G)
    c = s.cpus
    assert len(c["pod1c0"]) == 3
    assert disjoint(c["pod1c0"], c["pod0c0"], c["pod0c1"], c["pod0c2"])
    s.delete_all()
    s.create(contcount=4, annotations=pack, cpureq="500m", cpulim="500m", **G)
    c = s.cpus
    pod2 = [c[f"pod2c{i}"] for i in range(4)]
    assert [len(x) for x in pod2] == [2, 2, 2, 2]
    assert len(set.intersection(*(set(x) for x in pod2))) == 1
    assert len(set.union(*(set(x) for x in pod2))) == 3
    assert all(_nodes(s, f"pod2c{i}") == _nodes(s, "pod2c0") for i in range(4))
    s.create(annotations={ANN: "reserved"}, cpureq="500m", cpulim="500m", **G)
    c = s.cpus
    assert _nodes(s, "pod3c0") == _nodes(s, "pod2c0") and len(c["pod3c0"]) == 2
    assert [len(c[f"pod2c{i}"]) for i in range(4)] == [1, 1, 1, 1]
    assert all(disjoint(c["pod3c0"], c[f"pod2c{i}"]) for i in range(4))
    assert len(set.union(*(set(c[f"pod{p}"]) for p in ("3c0", "2c0", "2c1", "2c2", "2c3")))) == 4


LOAD_CFG = {
    "agent": {"nodeResourceTopology": True},
    "showContainersInNrt": True,
    "allocatorTopologyBalancing": False,
    "reservedResources": {"cpu": "750m"},
    "pinCPU": True,
    "pinMemory": True,
    "balloonTypes": [
        {"name": "pre-reserved-avx", "minCPUs": 2, "maxCPUs": 4, "minBalloons": 2,
         "loads": ["avx"]},
        {"name": "noload", "maxCPUs": 1},
        {"name": "l2load", "loads": ["membw"], "preferSpreadingPods": True,
         "preferNewBalloons": True},
        {"name": "l2htload", "loads": ["membw", "avx"], "preferSpreadingPods": True,
         "preferNewBalloons": True},
    ],
    "loadClasses": [
        {"name": "avx", "level": "core", "overloadsLevelInBalloon": True},
        {"name": "membw", "level": "l2cache"},
    ],
    "log": {"debug": ["policy"]},
}  # fmt: skip


def test15_loadclasses(tmp_path: Path) -> None:
    s = _scenario(tmp_path, L2_4CPU, LOAD_CFG)
    half = {"cpureq": "500m", "cpulim": "500m", "memreq": "100M", "memlim": ""}
    one = {"cpureq": "1", "cpulim": "1", "memreq": "100M", "memlim": ""}
    s.create(contcount=2, annotations={ANN: "l2load"}, **half)
    assert len(s.cpus["pod0c0"]) == 1 and len(s.cpus["pod0c1"]) == 1
    assert _nodes(s, "pod0c0").isdisjoint(_nodes(s, "pod0c1"))
    assert _packages(s, "pod0c0") == _packages(s, "pod0c1")
    s.create(annotations={ANN: "noload"}, **one)
    assert _packages(s, "pod1c0") == _packages(s, "pod0c0")
    s.create(annotations={ANN: "noload"}, **one)
    assert _packages(s, "pod2c0") != _packages(s, "pod1c0")
    lo = {"cpureq": "100m", "cpulim": "200m", "memreq": "100M", "memlim": ""}
    s.create(annotations={ANN: "l2htload"}, **lo)
    assert len(s.cpus["pod3c0"]) == 1 and _nodes(s, "pod3c0") == _nodes(s, "pod2c0")
    s.create(annotations={ANN: "l2htload"}, **lo)
    assert len(s.cpus["pod4c0"]) == 1 and _nodes(s, "pod3c0").isdisjoint(_nodes(s, "pod4c0"))
    g1 = {"cpureq": "1", "cpulim": "1", "memreq": "100M", "memlim": "100M"}
    s.create(contcount=2, annotations={ANN: "pre-reserved-avx"}, **g1)
    c = s.cpus
    assert len(_cores(s, "pod5c0")) == 2 and len(c["pod5c0"]) == 2 and c["pod5c0"] == c["pod5c1"]
    g2 = {"cpureq": "2", "cpulim": "2", "memreq": "100M", "memlim": "100M"}
    s.create(contcount=2, annotations={ANN: "pre-reserved-avx"}, **g2)
    c = s.cpus
    assert len(_cores(s, "pod6c0")) == 4 and len(c["pod6c0"]) == 4 and c["pod6c0"] == c["pod6c1"]
    assert _cores(s, "pod6c0").isdisjoint(_cores(s, "pod5c0"))
    s.delete("pod0", "pod3", "pod4", "pod5", "pod6")
    s.create(annotations={ANN: "l2htload"}, cpureq="4", cpulim="", memreq="", memlim="")
    assert len(s.cpus["pod7c0"]) == 4 and len(_cores(s, "pod7c0")) == 4


def test13_cacheclusters_2cpu(tmp_path: Path) -> None:
    s = _scenario(tmp_path, L2_2CPU, CACHE_CFG)
    s.control_plane()
    s.next_pod = 4  # the second half of upstream's test13, after a restart
    burst = {ANN: "l2burst"}
    s.create(contcount=4, annotations=burst, cpureq="500m", cpulim="500m", **G)
    c = s.cpus
    pod4 = [c[f"pod4c{i}"] for i in range(4)]
    assert [len(x) for x in pod4] == [2, 2, 2, 2] and disjoint(*pod4)
    assert disjoint(*(CpuSet(_nodes(s, f"pod4c{i}")) for i in range(4)))
    s.create(contcount=3, annotations=burst, cpureq="500m", cpulim="500m", **G)
    c = s.cpus
    pod5 = [c[f"pod5c{i}"] for i in range(3)]
    assert [len(x) for x in pod5] == [2, 2, 2]
    assert disjoint(*pod5, *(c[f"pod4c{i}"] for i in range(4)))
