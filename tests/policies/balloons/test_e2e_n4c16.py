"""nri-plugins' balloons e2e scenarios on the n4c16 VM (2 packages x 2 NUMA nodes x 2 cores
x 2 threads), replayed with the same configuration, pods, order and expectations.

Upstream: test/e2e/policies.test-suite/balloons/n4c16/<test>/code.var.sh and its *.cfg.
CPU names: upstream's ``cpuNN`` is CPU NN here.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.errors import ConfigError
from tests.policies.balloons.scenario import Scenario, disjoint
from tests.policies.balloons.test_e2e_metrics import has_line
from tests.sysfs.fakesys import N4C16

ANN = "balloon.balloons.resource-policy.nri.io"
NO_MEM = {"memreq": "", "memlim": ""}
GUARANTEED_100M = {"cpureq": "100m", "cpulim": "100m", "memreq": "100M", "memlim": "100M"}

# test/e2e/policies.test-suite/balloons/helm-config.yaml
HELM_CONFIG = {
    "pinCPU": True,
    "pinMemory": True,
    "balloonTypes": [
        {
            "name": "two-cpu",
            "minCPUs": 2,
            "maxCPUs": 2,
            "allocatorPriority": "high",
            "cpuClass": "class2",
            "preferNewBalloons": True,
        },
        {
            "name": "three-cpu",
            "namespaces": ["three"],
            "minCPUs": 3,
            "allocatorPriority": "normal",
            "cpuClass": "class3",
            "preferSpreadingPods": True,
        },
        {
            "name": "four-cpu",
            "minCPUs": 4,
            "maxCPUs": 8,
            "minBalloons": 1,
            "allocatorPriority": "low",
            "cpuClass": "class4",
        },
        {
            "name": "five-cpu",
            "maxCPUs": 5,
            "allocatorPriority": "none",
            "preferSpreadingPods": True,
            "preferNewBalloons": True,
            "cpuClass": "class5",
        },
    ],
    "availableResources": {"cpu": "cpuset:1-15"},
    "reservedResources": {"cpu": "1"},
    "instrumentation": {"httpEndpoint": ":8891"},
    "log": {"debug": ["policy"], "source": True, "klog": {"skip_headers": True}},
    "control": {
        "cpu": {
            "classes": {
                "default": {"minFreq": 800000, "maxFreq": 2800000},
                "class2": {"minFreq": 900000, "maxFreq": 2900000},
                "class3": {"minFreq": 1000000, "maxFreq": 3000000},
                "class4": {
                    "minFreq": 1100000,
                    "maxFreq": 3100000,
                    "energyPerformancePreference": 1,
                },
                "class5": {
                    "minFreq": 1200000,
                    "maxFreq": 3200000,
                    "energyPerformancePreference": 2,
                },
            }
        }
    },
}


def test01_basic_placement(tmp_path: Path) -> None:
    s = Scenario(tmp_path, HELM_CONFIG)
    s.create(namespace="kube-system", contcount=2, cpureq="")
    c = s.cpus
    assert c["pod0c0"] == c["pod0c1"] and len(c["pod0c0"]) == 1
    s.create(contcount=2, annotations={ANN: "two-cpu"}, **GUARANTEED_100M)
    c = s.cpus
    assert c["pod1c0"] == c["pod1c1"] and len(c["pod1c0"]) == 2
    s.create(annotations={ANN: "two-cpu"}, **GUARANTEED_100M)
    c = s.cpus
    assert len(c["pod2c0"]) == 2 and disjoint(c["pod2c0"], c["pod1c0"])
    s.create(namespace="three", contcount=2, cpureq="1500m", cpulim="1500m", memreq="100M",
             memlim="100M")  # fmt: skip
    c = s.cpus
    assert c["pod3c0"] == c["pod3c1"] and len(c["pod3c0"]) == 3
    s.delete_all()

    hide = "hide-hyperthreads.resource-policy.nri.io/container.pod4c1"
    s.create(contcount=3, cpureq="3", cpulim="3", annotations={ANN: "four-cpu", hide: "true"},
             **NO_MEM)  # fmt: skip
    c = s.cpus
    assert c["pod4c1"].issubset(c["pod4c0"]) and disjoint(c["pod4c2"], c["pod4c0"])
    assert (len(c["pod4c0"]), len(c["pod4c1"]), len(c["pod4c2"])) == (6, 3, 4)
    s.delete_all()

    s.create(contcount=3, cpureq="1250m", cpulim="", annotations={ANN: "five-cpu"}, **NO_MEM)
    c = s.cpus
    assert disjoint(c["pod5c0"], c["pod5c1"], c["pod5c2"])
    assert [len(c[f"pod5c{i}"]) for i in range(3)] == [2, 2, 2]
    s.create(contcount=4, annotations={ANN: "five-cpu"}, cpureq="")
    c = s.cpus
    pod6 = [c[f"pod6c{i}"] for i in range(4)]
    pod5 = [c[f"pod5c{i}"] for i in range(3)]
    assert {len(x) for x in pod6} == {1} and disjoint(*pod6)
    assert disjoint(set().union(*pod6), set().union(*pod5))  # type: ignore[arg-type]
    s.create(contcount=4, annotations={ANN: "five-cpu"}, cpureq="")
    c = s.cpus
    pod7 = [c[f"pod7c{i}"] for i in range(4)]
    assert {len(x) for x in pod7} == {1} and disjoint(*pod7)
    assert max(len(x) for x in c.values()) == 2
    assert disjoint(set().union(*pod7), set().union(*pod5))  # type: ignore[arg-type]


def _cpu(*ids: int) -> CpuSet:
    return CpuSet(ids)


RESERVED_CFG = {
    "reservedResources": {"cpu": "cpuset:0-2"},
    "idleCPUClass": "idle-class",
    "reservedPoolNamespaces": ["monitor-*", "*-log*"],
    "balloonTypes": [
        {"name": "reserved", "namespaces": ["my-exact-name"], "cpuClass": "reserved-class",
         "minCPUs": 1},
        {"name": "default", "minCPUs": 1},
        {"name": "full-core", "minCPUs": 2, "maxCPUs": 2, "cpuClass": "turbo", "minBalloons": 2},
    ],
    "instrumentation": {"httpEndpoint": ":8891"},
    "log": {"debug": ["policy"], "source": True, "klog": {"skip_headers": True}},
}  # fmt: skip


def test03_reserved(tmp_path: Path) -> None:
    s = Scenario(tmp_path, RESERVED_CFG)
    s.create(namespace="kube-system", **GUARANTEED_100M)
    assert s.cpus["pod0c0"].issubset(_cpu(0, 1, 2))
    s.create(namespace="monitor-mypods", contcount=2, cpureq="1", cpulim="1", **NO_MEM)
    c = s.cpus
    assert c["pod1c0"] == c["pod0c0"] and c["pod1c1"] == c["pod0c0"]
    s.create(namespace="system-logs", cpureq="1", cpulim="1", **NO_MEM)
    assert s.cpus["pod2c0"] == s.cpus["pod0c0"]
    s.create(namespace="kube-system", cpureq="2", cpulim="2", annotations={ANN: "full-core"},
             **NO_MEM)  # fmt: skip
    c = s.cpus
    assert len(c["pod3c0"]) == 2 and disjoint(c["pod0c0"], c["pod3c0"])
    s.create(cpureq="2500m", cpulim="2500m", **NO_MEM)
    c = s.cpus
    assert len(c["pod4c0"]) == 3 and disjoint(c["pod0c0"], c["pod3c0"], c["pod4c0"])
    s.create(cpureq="2500m", cpulim="2500m", annotations={ANN: "reserved"}, **NO_MEM)
    c = s.cpus
    assert _cpu(0, 1, 2).issubset(c["pod5c0"]) and len(c["pod5c0"]) > 4
    assert disjoint(c["pod5c0"], c["pod3c0"], c["pod4c0"])
    s.delete_all()
    s.create(cpureq="999m", cpulim="999m", **NO_MEM)
    assert len(s.cpus["pod6c0"]) == 1
    s.create(namespace="kube-system", **GUARANTEED_100M)
    assert s.cpus["pod7c0"].issubset(_cpu(0, 1, 2)) and len(s.cpus["pod7c0"]) < 3


GROUPBY_CFG = {
    "balloonTypes": [
        {"name": "grouped-by-label", "groupBy": "${pod/namespace}-${pod/labels/balloon-instance}",
         "minCPUs": 2, "minBalloons": 2, "preferNewBalloons": True},
        {"name": "default", "groupBy": "ns=$pod/namespace", "preferNewBalloons": True},
    ],
    "instrumentation": {"httpEndpoint": ":8891", "prometheusExport": True},
    "log": {"debug": ["policy"], "klog": {"skip_headers": True}},
}  # fmt: skip


def test04_groupby(tmp_path: Path) -> None:
    s = Scenario(tmp_path, GROUPBY_CFG)
    grouped = {ANN: "grouped-by-label"}
    ns = "e2e-balloons-test04"
    s.create(annotations=grouped, labels={"balloon-instance": "g1"})
    s.create(annotations=grouped, labels={"balloon-instance": "g2"})
    s.create(annotations=grouped, labels={"balloon-instance": "g1"})
    s.create(annotations=grouped, labels={"balloon-instance": "g1"}, namespace=ns)
    c = s.cpus
    assert c["pod0c0"] == c["pod2c0"] and disjoint(c["pod0c0"], c["pod1c0"], c["pod3c0"])
    s.create(namespace=ns, labels={"balloon-instance": "g1"})
    s.create(labels={"balloon-instance": "g1"})
    s.create(labels={"balloon-instance": "g1"})
    s.create(namespace=ns, labels={"balloon-instance": "g1"})
    c = s.cpus
    assert c["pod4c0"] == c["pod7c0"] and c["pod5c0"] == c["pod6c0"]
    assert disjoint(c["pod4c0"], c["pod5c0"])
    for group in ("e2e-balloons-test04-g1", "default-g2", "default-g1"):
        assert has_line(s, f'groups="{group}"')


NAMESPACE_CFG = {
    "reservedResources": {"cpu": "1"},
    "pinCPU": True,
    "pinMemory": True,
    "balloonTypes": [
        {"name": "nsballoon", "namespaces": ["*"], "minCPUs": 2, "maxCPUs": 4,
         "preferPerNamespaceBalloon": True},
    ],
    "log": {"debug": ["policy"]},
    "instrumentation": {"httpEndpoint": ":8891"},
}  # fmt: skip


def test05_namespace(tmp_path: Path) -> None:
    s = Scenario(tmp_path, NAMESPACE_CFG)
    g2 = {"cpureq": "2", "cpulim": "2", "memreq": "100M", "memlim": "100M"}
    s.create(contcount=2, cpureq="")
    c = s.cpus
    assert c["pod0c0"] == c["pod0c1"] and len(c["pod0c0"]) == 2
    s.create(namespace="e2e-a", contcount=2, cpureq="")
    c = s.cpus
    assert c["pod1c0"] == c["pod1c1"] and disjoint(c["pod0c0"], c["pod1c0"])
    s.create(contcount=2, **g2)
    c = s.cpus
    assert c["pod2c0"] == c["pod2c1"] == c["pod0c0"] == c["pod0c1"]
    assert len(c["pod2c0"]) == 4 and disjoint(c["pod2c0"], c["pod1c0"])
    s.create(contcount=2, **GUARANTEED_100M)
    c = s.cpus
    assert c["pod3c0"] == c["pod3c1"] and len(c["pod3c0"]) == 2
    assert disjoint(c["pod3c0"], c["pod2c0"], c["pod1c0"])
    s.create(namespace="e2e-b", contcount=2, **g2)
    c = s.cpus
    assert c["pod4c0"] == c["pod4c1"] and len(c["pod4c0"]) == 4
    assert disjoint(c["pod4c0"], c["pod3c0"], c["pod2c0"], c["pod1c0"])
    s.create(namespace="e2e-c", contcount=2, **GUARANTEED_100M)
    c = s.cpus
    assert c["pod5c0"] == c["pod5c1"] and len(c["pod5c0"]) == 2
    assert disjoint(c["pod5c0"], c["pod4c0"], c["pod3c0"], c["pod2c0"], c["pod1c0"])
    s.create(namespace="e2e-d", contcount=2, **GUARANTEED_100M)
    assert s.cpus["pod6c0"] == s.cpus["pod6c1"]
    preserve = {
        "cpu.preserve.resource-policy.nri.io/container.pod7c1": "true",
        "memory.preserve.resource-policy.nri.io": "true",
    }
    s.create(namespace="e2e-d", contcount=3, annotations=preserve, **GUARANTEED_100M)
    c = s.cpus
    assert c["pod6c0"] == c["pod7c0"]
    assert len(c["pod7c1"]) > len(c["pod7c0"]) and len(c["pod7c1"]) == 16


def _maxballoons_cfg(second: dict[str, object]) -> dict[str, object]:
    return {
        "reservedResources": {"cpu": "1"},
        "pinCPU": True,
        "pinMemory": True,
        "balloonTypes": [
            {"name": "singleton", "minCPUs": 2, "maxCPUs": 2, "minBalloons": 1,
             "maxBalloons": 1},
            second,
        ],
        "log": {"debug": ["policy"]},
        "instrumentation": {"httpEndpoint": ":8891"},
    }  # fmt: skip


def test07_maxballoons(tmp_path: Path) -> None:
    dyn = {"name": "dynamictwo", "maxCPUs": 1, "maxBalloons": 2, "preferNewBalloons": True}
    s = Scenario(tmp_path, _maxballoons_cfg(dyn))
    single, two = {ANN: "singleton"}, {ANN: "dynamictwo"}
    s.create(cpureq="1500m", cpulim="1500m", annotations=single)
    assert len(s.cpus["pod0c0"]) == 2
    s.create(cpureq="500m", cpulim="500m", annotations=single)
    assert s.cpus["pod0c0"] == s.cpus["pod1c0"]
    err = s.try_create(cpureq="100m", cpulim="100m", annotations=single)
    assert err is not None and "no suitable balloon instance available" in str(err)
    s.create(cpureq="800m", cpulim="800m", annotations=two)
    assert len(s.cpus["pod2c0"]) == 1
    s.create(cpureq="600m", cpulim="600m", annotations=two)
    assert disjoint(s.cpus["pod2c0"], s.cpus["pod3c0"])
    s.create(cpureq="300m", cpulim="300m", annotations=two)
    assert s.cpus["pod4c0"] == s.cpus["pod3c0"]
    err = s.try_create(cpureq="300m", cpulim="300m", annotations=two)
    assert err is not None and "no suitable balloon instance available" in str(err)
    s.delete_all()
    impossible = {"name": "impossible", "minBalloons": 2, "maxBalloons": 1}
    with pytest.raises(ConfigError, match="minBalloons"):
        Scenario(tmp_path, _maxballoons_cfg(impossible))


NUMA_CFG = {
    "availableResources": {"cpu": "cpuset:0-15"},
    "reservedResources": {"cpu": "1"},
    "pinCPU": True,
    "pinMemory": True,
    "balloonTypes": [
        {"name": "fit-in-numa", "namespaces": ["*"], "minCPUs": 0, "maxCPUs": 4,
         "allocatorPriority": "high", "preferNewBalloons": False},
    ],
    "instrumentation": {"httpEndpoint": ":8891"},
}  # fmt: skip


def _same(c: dict[str, CpuSet], names: list[str], size: int) -> bool:
    return all(c[n] == c[names[0]] and len(c[n]) == size for n in names)


def test08_numa(tmp_path: Path) -> None:
    s = Scenario(tmp_path, NUMA_CFG)
    one = {"cpureq": "1", "cpulim": "1", "memreq": "50M", "memlim": "50M"}
    s.create(cpureq="")
    assert len(s.cpus["pod0c0"]) == 1
    for n in range(1, 5):
        s.create(**one)
        size = max(1, n)
        assert _same(s.cpus, [f"pod{i}c0" for i in range(n + 1)], size), (n, s.cpus)
    s.create(cpureq="")
    assert _same(s.cpus, [f"pod{i}c0" for i in range(6)], 4)
    s.create(**one)
    c = s.cpus
    assert _same(c, [f"pod{i}c0" for i in range(6)], 4) and len(c["pod6c0"]) == 1
    assert disjoint(c["pod0c0"], c["pod6c0"])
    s.delete("pod1", "pod2", "pod3")
    c = s.cpus
    assert _same(c, ["pod0c0", "pod4c0", "pod5c0"], 1) and len(c["pod6c0"]) == 1
    assert disjoint(c["pod0c0"], c["pod6c0"])
    s.delete("pod4")
    c = s.cpus
    assert _same(c, ["pod0c0", "pod5c0"], 1) and len(c["pod6c0"]) == 1
    assert disjoint(c["pod0c0"], c["pod6c0"])


# test/e2e/policies.test-suite/balloons/match-config.yaml
MATCH_CFG = {
    "reservedResources": {"cpu": "750m"},
    "pinCPU": True,
    "pinMemory": True,
    "idleCPUClass": "normal",
    "allocatorTopologyBalancing": True,
    "preserve": {
        "matchExpressions": [
            {"key": "name", "operator": "In", "values": ["pod1cX", "pod2c1", "pod2c2", "pod3cX"]}
        ]
    },
    "balloonTypes": [
        {"name": "special", "matchExpressions": [
            {"key": "pod/labels/app.kubernetes.io/component", "operator": "Equals",
             "values": ["precious"]}], "minCPUs": 2, "maxCPUs": 2},
        {"name": "default", "namespaces": ["default"], "minCPUs": 1, "maxCPUs": 1,
         "allocatorPriority": "normal"},
    ],
    "reservedPoolNamespaces": ["kube-system"],
    "log": {"debug": ["policy", "expression"]},
}  # fmt: skip


def test11_match_expression(tmp_path: Path) -> None:
    s = Scenario(tmp_path, MATCH_CFG)
    s.create(labels={"app.kubernetes.io/component": "precious"})
    assert len(s.cpus["pod0c0"]) == 2
    s.create()
    assert len(s.cpus["pod1c0"]) == 1
    s.create(contcount=4)
    c = s.cpus
    assert [len(c[f"pod2c{i}"]) for i in range(4)] == [1, 16, 16, 1]


ISOLATED_CFG = {
    "reservedResources": {"cpu": "cpuset:0"},
    "balloonTypes": [
        {"name": "isolated-pods", "minCPUs": 0, "maxCPUs": 2, "cpuClass": "turbo",
         "minBalloons": 2, "preferNewBalloons": True, "preferSpreadingPods": False},
        {"name": "isolated-ctrs", "minCPUs": 1, "maxCPUs": 1, "cpuClass": "turbo",
         "minBalloons": 2, "preferNewBalloons": True, "preferSpreadingPods": True},
    ],
    "instrumentation": {"httpEndpoint": ":8891", "prometheusExport": True},
    "log": {"debug": ["policy"], "klog": {"skip_headers": True}},
}  # fmt: skip


def _instances(s: Scenario, type_name: str) -> set[str]:
    """The balloon instances of a type (what upstream's metrics list as ``balloon=``)."""
    return {b.name for b in s.policy.state.balloons if b.type.name == type_name}


def test09_isolated(tmp_path: Path) -> None:
    s = Scenario(tmp_path, ISOLATED_CFG)
    pods_ann, ctrs_ann = {ANN: "isolated-pods"}, {ANN: "isolated-ctrs"}
    assert _instances(s, "isolated-pods") == {"isolated-pods[0]", "isolated-pods[1]"}
    s.create(contcount=2, annotations=pods_ann, cpureq="")
    c = s.cpus
    assert len(c["pod0c0"]) == 1 and c["pod0c0"] == c["pod0c1"]
    s.create(contcount=2, annotations=pods_ann, cpureq="600m", cpulim="600m", memreq="100M",
             memlim="100M")  # fmt: skip
    c = s.cpus
    assert len(c["pod1c0"]) == 2 and c["pod1c0"] == c["pod1c1"]
    assert disjoint(c["pod0c0"], c["pod1c0"])
    assert _instances(s, "isolated-pods") == {"isolated-pods[0]", "isolated-pods[1]"}
    s.create(contcount=2, annotations=pods_ann, cpureq="100m", cpulim="200m", memreq="100M",
             memlim="100M")  # fmt: skip
    c = s.cpus
    assert len(c["pod2c0"]) == 1 and c["pod2c0"] == c["pod2c1"]
    assert disjoint(c["pod0c0"], c["pod1c0"], c["pod2c0"])
    assert len(_instances(s, "isolated-pods")) == 3
    s.create(contcount=4, annotations=ctrs_ann, cpureq="")
    c = s.cpus
    assert [len(c[f"pod3c{i}"]) for i in range(4)] == [1, 1, 1, 1]
    assert len(c["pod0c0"]) == 1 and len(c["pod1c0"]) == 2 and len(c["pod2c0"]) == 1
    assert disjoint(c["pod0c0"], c["pod1c0"], c["pod2c0"], *(c[f"pod3c{i}"] for i in range(4)))
    assert len(_instances(s, "isolated-pods")) == 3
    assert _instances(s, "isolated-ctrs") == {f"isolated-ctrs[{i}]" for i in range(4)}


def test22_isolcpus(tmp_path: Path) -> None:
    cfg = {
        "balloonTypes": [
            {"name": "isolcpus", "minCPUs": 1, "minBalloons": 1, "preferIsolCpus": True,
             "namespaces": ["isolcpus"]},
        ],
        "log": {"debug": ["policy"], "klog": {"skip_headers": True}},
    }  # fmt: skip
    s = Scenario(tmp_path, cfg, layout=attrs.evolve(N4C16, isolated="0,1"))
    s.create(contcount=2)
    c = s.cpus
    assert (c["pod0c0"] | c["pod0c1"]).isdisjoint(_cpu(0, 1))
    s.create(contcount=2, namespace="isolcpus")
    c = s.cpus
    assert c["pod1c0"] == _cpu(0, 1) and c["pod1c1"] == _cpu(0, 1)


def test23_available_cpus(tmp_path: Path) -> None:
    cfg = {
        "availableResources": {"cpu": "exclude-cpuset:0-1,4-5,8-9,12-13"},
        "reservedResources": {"cpu": "exclude-cpuset:4-15"},
        "idleCPUClass": "idle-class",
        "reservedPoolNamespaces": ["reserved"],
        "balloonTypes": [
            {"name": "reserved", "cpuClass": "reserved-class", "minCPUs": 1, "maxCPUs": 2},
        ],
        "instrumentation": {"httpEndpoint": ":8891"},
        "log": {"debug": ["policy"], "source": True, "klog": {"skip_headers": True}},
    }
    s = Scenario(tmp_path, cfg)
    s.create(namespace="kube-system", cpureq="50m", cpulim="")
    assert s.cpus["pod0c0"].issubset(_cpu(2, 3))
    s.create(namespace="reserved", cpureq="50m", cpulim="")
    assert s.cpus["pod1c0"].issubset(_cpu(2, 3))


ALLOCATOR_CFG = {
    "reservedResources": {"cpu": "1"},
    "allocatorTopologyBalancing": True,
    "preferSpreadOnPhysicalCores": True,
    "balloonTypes": [
        {"name": "policydefaults", "minCPUs": 2, "minBalloons": 2},
        {"name": "topo1cores0", "minCPUs": 2, "minBalloons": 1,
         "preferSpreadOnPhysicalCores": False},
        {"name": "topo0cores1", "allocatorTopologyBalancing": False,
         "preferSpreadOnPhysicalCores": True},
        {"name": "topo0cores0", "allocatorTopologyBalancing": False,
         "preferSpreadOnPhysicalCores": False},
        {"name": "topo1cores1", "allocatorTopologyBalancing": True,
         "preferSpreadOnPhysicalCores": True},
        {"name": "device-node2", "preferNewBalloons": True, "preferSpreadOnPhysicalCores": True,
         "preferCloseToDevices": ["/sys/devices/system/node/node2"]},
    ],
    "instrumentation": {"httpEndpoint": ":8891", "prometheusExport": True},
    "log": {"debug": ["policy"], "klog": {"skip_headers": True}},
}  # fmt: skip


def test10_allocator_opts(tmp_path: Path) -> None:
    s = Scenario(tmp_path, ALLOCATOR_CFG)
    system = s.system

    def cores(name: str) -> set[int]:
        return {min(system.cpus[c].threads) for c in s.cpus[name]}

    def nodes(name: str) -> set[int]:
        return {system.cpus[c].node for c in s.cpus[name]}

    g1 = {"cpureq": "1", "cpulim": "1", "memreq": "100M", "memlim": "100M"}
    s.create(annotations={ANN: "policydefaults"}, **GUARANTEED_100M)
    assert len(cores("pod0c0")) == 2 and len(s.cpus["pod0c0"]) == 2 and 2 not in nodes("pod0c0")
    s.create(annotations={ANN: "topo1cores0"}, **GUARANTEED_100M)
    assert len(cores("pod1c0")) == 1 and len(s.cpus["pod1c0"]) == 2 and 2 not in nodes("pod1c0")
    s.create(annotations={ANN: "topo1cores1"}, contcount=2, **g1)
    c = s.cpus
    assert len(cores("pod2c0")) == 2 and len(c["pod2c0"]) == 2 and c["pod2c0"] == c["pod2c1"]
    assert 2 not in nodes("pod2c0")
    s.delete("pod0", "pod1", "pod2")
    s.create(annotations={ANN: "topo0cores0"}, contcount=2, **g1)
    c = s.cpus
    assert len(cores("pod3c0")) == 1 and len(c["pod3c0"]) == 2 and c["pod3c0"] == c["pod3c1"]
    assert 2 not in nodes("pod3c0")
    s.create(annotations={ANN: "device-node2"}, cpureq="3", cpulim="6", memreq="100M",
             memlim="100M")  # fmt: skip
    assert nodes("pod4c0") == {2} and len(cores("pod4c0")) == 2 and len(s.cpus["pod4c0"]) == 3
    s.create(annotations={ANN: "device-node2"}, cpureq="2", cpulim="6", memreq="100M",
             memlim="100M")  # fmt: skip
    assert 2 not in nodes("pod5c0") and len(cores("pod5c0")) == 2 and len(s.cpus["pod5c0"]) == 2
