"""More of nri-plugins' balloons e2e scenarios on n4c16: reconfiguration (test06) and a
kernel without NUMA (test30)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from nri_resmgr.cpuset import CpuSet
from tests.policies.balloons.scenario import Scenario, disjoint
from tests.policies.balloons.test_e2e_metrics import has_line
from tests.sysfs.fakesys import N4C16, write_sysfs

ANN = "balloon.balloons.resource-policy.nri.io"
G1 = {"cpureq": "1", "cpulim": "1", "memreq": "100M", "memlim": "100M"}


def _btypes_cr(skip: set[int] = frozenset(), **values: Any) -> dict[str, Any]:  # type: ignore[assignment]
    """test/e2e/policies.test-suite/balloons/balloons-config.yaml.in with its defaults."""
    v = {"AVAILABLE_CPU": "cpuset:0-15", "BTYPE1_MAXCPUS": 1, "BTYPE2_NAMESPACE0": "btype2ns0",
         "BTYPE0_CPUCLASS": "classA", "BTYPE2_CPUCLASS": "classC", **values}  # fmt: skip
    types = [
        {"name": "btype0", "minCPUs": 2, "maxCPUs": 2, "allocatorPriority": "high",
         "cpuClass": v["BTYPE0_CPUCLASS"], "preferNewBalloons": True,
         "preferSpreadingPods": False},
        {"name": "btype1", "namespaces": ["btype1ns0"], "minCPUs": 1,
         "maxCPUs": v["BTYPE1_MAXCPUS"], "allocatorPriority": "normal", "cpuClass": "classB",
         "preferNewBalloons": False, "preferSpreadingPods": True},
        {"name": "btype2", "namespaces": [v["BTYPE2_NAMESPACE0"], "btype2ns1"], "minCPUs": 4,
         "maxCPUs": 8, "minBalloons": 1, "allocatorPriority": "low",
         "cpuClass": v["BTYPE2_CPUCLASS"], "preferNewBalloons": False,
         "preferSpreadingPods": False},
    ]  # fmt: skip
    return {
        "availableResources": {"cpu": v["AVAILABLE_CPU"]},
        "reservedResources": {"cpu": "1000m"},
        "pinCPU": True,
        "pinMemory": True,
        "balloonTypes": [t for i, t in enumerate(types) if i not in skip],
        "instrumentation": {"httpEndpoint": ":8891", "prometheusExport": True},
        "log": {"debug": ["policy"]},
        "cpuClasses": [
            {"name": "default", "minFreq": "800MHz", "maxFreq": "2.8GHz"},
            {"name": "classA", "minFreq": "900MHz", "maxFreq": "2.9GHz"},
            {"name": "classB", "minFreq": "1GHz", "maxFreq": "3GHz"},
            {"name": "classC", "minFreq": "1.1GHz", "maxFreq": "3.1GHz"},
        ],
    }


def test06_update_config(tmp_path: Path) -> None:
    initial = {
        "reservedResources": {"cpu": "750m"},
        "pinCPU": True,
        "pinMemory": True,
        "log": {"debug": ["resource-manager", "cache", "policy"], "source": True,
                "klog": {"skip_headers": True}},
    }  # fmt: skip
    s = Scenario(tmp_path, initial)
    s.reconfigure(
        _btypes_cr(AVAILABLE_CPU="cpuset:0,4-15", BTYPE2_NAMESPACE0="*", BTYPE1_MAXCPUS=0)
    )
    s.create(annotations={ANN: "btype0"}, **G1)
    s.create(namespace="btype1ns0", **G1)
    s.create(namespace="e2e-balloons-test06", **G1)
    # Upstream reads these from the balloons metrics (balloon=…, containers=…).
    assert [s.balloon_of(f"pod{i}c0") for i in range(3)] == ["btype0[0]", "btype1[0]", "btype2[0]"]
    s.reconfigure(_btypes_cr(skip={0, 1}, BTYPE2_NAMESPACE0="*"))
    assert s.balloon_of("pod1c0") == s.balloon_of("pod2c0") == "btype2[0]"
    s.reconfigure(_btypes_cr(skip={1}, BTYPE2_NAMESPACE0="*"))
    assert [s.balloon_of(f"pod{i}c0") for i in range(3)] == ["btype0[0]", "btype2[0]", "btype2[0]"]
    # The balloons gauge names each balloon type's cpuClass (the class itself is not applied).
    assert has_line(s, r'btype0\[0\].*pod0/pod0c0.*cpu_class="classA"')
    assert has_line(s, r'btype2\[0\].*pod1/pod1c0.*cpu_class="classC"')
    assert has_line(s, r'btype2\[0\].*pod2/pod2c0.*cpu_class="classC"')
    s.reconfigure(
        _btypes_cr(skip={1}, BTYPE2_NAMESPACE0="*", BTYPE0_CPUCLASS="classC",
                   BTYPE2_CPUCLASS="classB")
    )  # fmt: skip
    assert [s.balloon_of(f"pod{i}c0") for i in range(3)] == ["btype0[0]", "btype2[0]", "btype2[0]"]
    assert has_line(s, r'btype0\[0\].*pod0/pod0c0.*cpu_class="classC"')
    assert has_line(s, r'btype2\[0\].*pod1/pod1c0.*cpu_class="classB"')
    assert has_line(s, r'btype2\[0\].*pod2/pod2c0.*cpu_class="classB"')


def test30_numa_disabled(tmp_path: Path) -> None:
    # A kernel without NUMA: no /sys/devices/system/node; cpu7's L2 cache is its core's.
    write_sysfs(tmp_path, N4C16)
    shutil.rmtree(tmp_path / "sys/devices/system/node")
    index2 = tmp_path / "sys/devices/system/cpu/cpu7/cache/index2"
    index2.mkdir(parents=True)
    (index2 / "shared_cpu_list").write_text("6-7\n")
    cfg = {
        "agent": {"nodeResourceTopology": True},
        "balloonTypes": [
            {"name": "single-thread-own-core", "minCPUs": 2, "maxCPUs": 2, "minBalloons": 1,
             "preferCloseToDevices": ["/sys/devices/system/cpu/cpu7/cache/index2"]},
            {"name": "default", "allocatorTopologyBalancing": True, "preferSpreadingPods": True,
             "minCPUs": 5, "minBalloons": 2, "showContainersInNrt": True},
        ],
        "log": {"debug": ["policy"], "klog": {"skip_headers": True}},
    }  # fmt: skip
    s = Scenario(tmp_path, cfg, write=False)
    ann = {ANN: "single-thread-own-core", "hide-hyperthreads.resource-policy.nri.io": "true"}
    s.create(contcount=2, annotations=ann)
    c = s.cpus
    both = c["pod0c0"] | c["pod0c1"]
    assert len(both) == 1 and len(both & CpuSet([6, 7])) == 1
    s.create(contcount=2)
    c = s.cpus
    assert c["pod1c0"].isdisjoint(CpuSet([6, 7])) and c["pod1c1"].isdisjoint(CpuSet([6, 7]))
    assert len(c["pod1c0"]) == len(c["pod1c1"]) == 5 and disjoint(c["pod1c0"], c["pod1c1"])


def _node_type(n: int) -> dict[str, Any]:
    return {"name": f"node{n}", "preferCloseToDevices": [f"/sys/devices/system/node/node{n}"]}


COMPOSITE_CFG = {
    "agent": {"nodeResourceTopology": True},
    "allocatorTopologyBalancing": False,
    "reservedResources": {"cpu": "750m"},
    "pinCPU": True,
    "pinMemory": True,
    "balloonTypes": [
        *(_node_type(n) for n in range(4)),
        {"name": "balance-all-nodes", "components": [{"balloonType": "balance-pkg0-nodes"},
         {"balloonType": "balance-pkg1-nodes"}], "minCPUs": 4, "minBalloons": 1,
         "showContainersInNrt": True},
        {"name": "balance-pkg0-nodes", "components": [{"balloonType": "node0"},
         {"balloonType": "node1"}]},
        {"name": "balance-pkg1-nodes", "componentCreation": "all", "components": [
            {"balloonType": "node2"}, {"balloonType": "node3"}], "preferNewBalloons": True},
        {"name": "nodes2301", "componentCreation": "balance-balloons", "components": [
            {"balloonType": f"node{n}"} for n in (2, 3, 0, 1)], "preferNewBalloons": True},
        {"name": "balance-both-nodes-on-either-pkg", "componentCreation": "balance-balloons",
         "components": [{"balloonType": "balance-pkg0-nodes"},
                        {"balloonType": "balance-pkg1-nodes"}], "preferNewBalloons": True},
        {"name": "new-on-node-1", "components": [{"balloonType": "node1"}],
         "preferNewBalloons": True},
        {"name": "kube-system-cpu-core",
         "preferCloseToDevices": ["/sys/devices/system/cpu/cpu6/cache/index0"]},
        {"name": "reserved", "components": [{"balloonType": "kube-system-cpu-core"}]},
    ],
    "log": {"debug": ["policy"]},
}  # fmt: skip


def test16_composite_balloons(tmp_path: Path) -> None:
    write_sysfs(tmp_path, N4C16)
    index0 = tmp_path / "sys/devices/system/cpu/cpu6/cache/index0"
    index0.mkdir(parents=True)
    (index0 / "shared_cpu_list").write_text("6-7\n")
    s = Scenario(tmp_path, COMPOSITE_CFG, write=False)
    system = s.system

    def nodes(name: str) -> set[int]:
        return {system.cpus[c].node for c in s.cpus[name]}

    def per_node(cpus: CpuSet) -> list[int]:
        return [len(cpus & system.nodes[n].cpus) for n in range(4)]

    all_nodes = {ANN: "balance-all-nodes"}
    s.create(contcount=2, annotations=all_nodes, cpureq="500m", cpulim="500m", memreq="100M",
             memlim="")  # fmt: skip
    c = s.cpus
    assert len(c["pod0c0"]) == len(c["pod0c1"]) == 4
    assert nodes("pod0c0") == nodes("pod0c1") == {0, 1, 2, 3}
    s.create(annotations=all_nodes, cpureq="9", cpulim="", memreq="100M", memlim="")
    c = s.cpus
    assert len(c["pod1c0"]) == 12 and c["pod0c0"] == c["pod0c1"] == c["pod1c0"]
    assert per_node(c["pod1c0"]) == [3, 3, 3, 3] and len(c["pod1c0"] & CpuSet([6, 7])) == 1
    s.create(namespace="kube-system", cpureq="100m", cpulim="100m", memreq="", memlim="")
    assert s.cpus["pod2c0"].issubset(CpuSet([6, 7]))
    s.delete("pod1")
    c = s.cpus
    assert len(c["pod0c0"]) == 4 and c["pod0c0"] == c["pod0c1"]
    assert per_node(c["pod0c0"]) == [1, 1, 1, 1]
    s.delete_all()
    pkg1 = {ANN: "balance-pkg1-nodes"}
    s.create(annotations=pkg1, cpureq="1", cpulim="", memreq="100M", memlim="")
    c = s.cpus
    assert len(c["pod3c0"]) == 2 and per_node(c["pod3c0"])[2:] == [1, 1]
    s.create(annotations=pkg1, cpureq="4", cpulim="", memreq="100M", memlim="")
    c = s.cpus
    assert len(c["pod4c0"]) == 4 and per_node(c["pod4c0"])[2:] == [2, 2]
    assert disjoint(c["pod4c0"], c["pod3c0"])
    s.delete_all()
    s.create(annotations=all_nodes, cpureq="12", cpulim="", memreq="100M", memlim="")
    c = s.cpus
    assert len(c["pod5c0"]) == 12 and per_node(c["pod5c0"]) == [3, 3, 3, 3]
    s.delete_all()
    s.next_pod = 0  # upstream resets its pod counter here
    one = {"cpureq": "1", "cpulim": "", "memreq": "100M", "memlim": ""}
    # componentCreation balance-balloons: node balloons in the order 2, 3, 0, 1, each the
    # component type with the fewest instances at the time.
    for pod, node in enumerate((2, 3, 0, 1)):
        s.create(annotations={ANN: "nodes2301"}, **one)
        assert nodes(f"pod{pod}c0") == {node}, pod
    s.delete("pod1")  # it ran in the node3 balloon: node3 has the fewest instances again
    s.create(annotations={ANN: "nodes2301"}, **one)
    assert nodes("pod4c0") == {3}
    s.delete_all()
    s.create(annotations={ANN: "new-on-node-1"}, **one)
    assert nodes("pod5c0") == {1}
    # pod5's node1 balloon is a component instance too: balance-pkg0-nodes (node0 + node1)
    # would count one instance more than balance-pkg1-nodes (node2 + node3), so the first
    # balance-both-nodes-on-either-pkg balloon is made of the latter; then they alternate.
    for pod, pair in ((6, {2, 3}), (7, {0, 1}), (8, {2, 3})):
        s.create(annotations={ANN: "balance-both-nodes-on-either-pkg"}, **one)
        assert nodes(f"pod{pod}c0") == pair, pod
