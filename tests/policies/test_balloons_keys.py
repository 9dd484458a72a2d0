"""Every upstream BalloonsPolicy key loads; each is applied or said to be not applied; the
keys applied here change placement."""

from __future__ import annotations

import logging
from pathlib import Path

import attrs
import pytest

from nri_resmgr.config import notapplied
from nri_resmgr.config.expressions import evaluate, expand
from nri_resmgr.config.loader import structure_spec
from nri_resmgr.config.models import (
    BalloonsSpec,
    BalloonType,
    ContainerMatch,
    Expression,
    PolicySpec,
)
from nri_resmgr.config.notapplied import leaf_paths
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.errors import ConfigError
from nri_resmgr.policies.balloons import BalloonsPolicy
from nri_resmgr.policies.balloons.keys import APPLIED, NOT_APPLIED
from nri_resmgr.policies.subject import container_subject
from nri_resmgr.resmgr.model import Resources
from tests.policies.workload import (
    Runtime,
    balloons_spec,
    besteffort,
    burstable,
    container,
    guaranteed,
    pod,
    start,
)
from tests.sysfs.fakesys import N4C16


def _own_paths() -> list[str]:
    common = set(leaf_paths(PolicySpec))
    return [p for p in leaf_paths(BalloonsSpec) if p not in common]


def test_every_balloons_key_is_applied_or_declared() -> None:
    paths = _own_paths()
    undecided = [p for p in paths if p not in APPLIED and p not in NOT_APPLIED]
    assert undecided == []
    both = sorted(APPLIED & set(NOT_APPLIED))
    assert both == []
    stale = sorted((APPLIED | set(NOT_APPLIED)) - set(paths))
    assert stale == []


UPSTREAM_SPEC = {
    "reservedResources": {"cpu": "exclude-cpuset:1-15"},
    "idleCPUClass": "idle",
    "showContainersInNrt": True,
    "preserve": {"matchExpressions": [{"key": "pod/labels/keep", "operator": "Exists"}]},
    "loadClasses": [{"name": "avx", "level": "core", "overloadsLevelInBalloon": True}],
    "schedulingClasses": [
        {"name": "rt", "policy": "fifo", "priority": 10, "ioClass": "be", "ioPriority": 1}
    ],
    "cpuClasses": [
        {"name": "turbo", "minFreq": "turbo", "maxFreq": "turbo", "turboPriority": 10},
        {"name": "pct", "pctPriority": "high", "sstClosID": 0, "minFreq": "2GHz"},
    ],
    "turboDomain": "system",
    "controllableInterrupts": ["*"],
    "balloonTypes": [
        {
            "name": "a",
            "matchExpressions": [{"key": "qosclass", "operator": "In", "values": ["Burstable"]}],
            "groupBy": "${pod/namespace}-${pod/labels/x}",
            "memoryTypes": ["DRAM"],
            "loads": ["avx"],
            "preferCloseToDevices": ["/sys/class/net/eth0"],
            "preferCoreType": "performance",
            "schedulingClass": "rt",
            "showContainersInNrt": False,
            "irqClaim": ["*"],
            "irqMode": "sink",
            "hideHyperthreads": True,
            "cpuClass": "turbo",
        },
        {"name": "b", "components": [{"balloonType": "a"}], "componentCreation": "all"},
    ],
}


def test_every_upstream_key_loads_and_the_unapplied_ones_are_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spec = structure_spec(UPSTREAM_SPEC, "BalloonsPolicy")
    assert isinstance(spec, BalloonsSpec)
    assert spec.reserved_resources.cpu.text == "exclude-cpuset:1-15"
    notapplied._reported.clear()
    with caplog.at_level(logging.WARNING):
        p = BalloonsPolicy()
        start(p, tmp_path, N4C16, spec)
        p.reconfigure(spec)
    said = [r.getMessage() for r in caplog.records if "accepted, not applied" in r.message]
    for key in ("spec.turboDomain", "spec.balloonTypes[].irqMode", "spec.cpuClasses[].sstClosID"):
        assert sum(m.startswith(f"{key}: accepted, not applied by nri-resmgr") for m in said) == 1
    # Applied keys are never said to be unapplied; unset ones neither.
    assert not any(m.split(":")[0] in APPLIED for m in said)
    assert not any(m.startswith("spec.schedulingClasses[].nice:") for m in said)
    # exclude-cpuset: the reserved CPUs are the allowed ones minus the set.
    assert str(p.state.reserved) == "0"


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (
            {"matchExpressions": [{"key": "bogus", "operator": "Exists"}]},
            "spec.balloonTypes[0].matchExpressions[0].key: unknown key 'bogus'",
        ),
        (
            {"matchExpressions": [{"key": "name", "operator": "Equals", "values": []}]},
            "operator Equals takes exactly one value",
        ),
        ({"loads": ["nope"]}, "spec.balloonTypes[0].loads[0]: unknown load class 'nope'"),
        ({"groupBy": "${pod/nothing}"}, "spec.balloonTypes[0].groupBy: unknown key 'nothing'"),
        ({"components": [{"balloonType": "zz"}]}, "unknown balloon type 'zz'"),
        ({"schedulingClass": "zz"}, "unknown scheduling class 'zz'"),
        ({"componentCreation": "all"}, "componentCreation: 'all' without components"),
    ],
)
def test_bad_references_name_the_key(bad: dict[str, object], error: str) -> None:
    data = {"reservedResources": {"cpu": "1"}, "balloonTypes": [{"name": "t", **bad}]}
    with pytest.raises(ConfigError) as info:
        structure_spec(data, "BalloonsPolicy")
    assert any(error in e for e in info.value.errors), info.value.errors


def test_expressions_resolve_container_and_pod_keys() -> None:
    p = pod("web", "burstable", namespace="shop")
    p = attrs.evolve(p, labels={"app": "web", "tier/x": "1"})
    c = container(p, "main", 100, 200)
    s = container_subject(p, c)
    assert evaluate(Expression("qosclass", "Equals", ("Burstable",)), s)
    assert evaluate(Expression("pod/labels/app", "In", ("db", "web")), s)
    assert evaluate(Expression("pod/labels/tier/x", "Exists"), s)
    assert not evaluate(Expression("labels/app", "Exists"), s)  # container labels: none
    assert evaluate(Expression("name", "Matches", ("ma*",)), s)
    assert evaluate(Expression(":,-pod/namespace,name", "Equals", ("shop-main",)), s)
    assert evaluate(Expression("pod/labels/zz", "NotEqual", ("x",)), s)
    assert expand("ns=$pod/namespace", s) == "ns=shop"
    assert expand("${pod/namespace}-${pod/labels/app}", s) == "shop-web"
    with pytest.raises(KeyError):
        expand("${pod/labels/zz}", s)


def _policy(tmp_path: Path, *types: BalloonType, **kw: object) -> BalloonsPolicy:
    p = BalloonsPolicy()
    start(p, tmp_path, N4C16, balloons_spec(balloon_types=types, **kw))
    return p


def test_match_expressions_choose_the_type(tmp_path: Path) -> None:
    ded = BalloonType(
        name="dedicated",
        match_expressions=(Expression("qosclass", "In", ("Guaranteed",)),),
    )
    shared = BalloonType(
        name="shared",
        match_expressions=(Expression("qosclass", "In", ("Burstable", "BestEffort")),),
    )
    p = _policy(tmp_path, ded, shared)
    pools = {}
    for name, pc in {
        "g": guaranteed("g", 1000),
        "b": burstable("b", 100, 200),
        "e": besteffort("e"),
        "k": besteffort("k", namespace="kube-system"),
    }.items():
        p.create_container(*pc)
        a = p.state.members.get(pc[1].id)
        assert a is not None
        pools[name] = a.pool
    # Types are tried in order: reserved first (kube-system), then the expressions.
    assert pools == {"g": "dedicated[0]", "b": "shared[0]", "e": "shared[0]", "k": "reserved[0]"}


def test_preserve_leaves_matching_containers_alone(tmp_path: Path) -> None:
    keep = ContainerMatch((Expression("name", "Equals", ("sidecar",)),))
    p = _policy(tmp_path, preserve=keep)
    pd = guaranteed("p", 1000)[0]
    side, main = container(pd, "sidecar", 1000, 1000), container(pd, "main", 1000, 1000)
    adj, updates = p.create_container(pd, side)
    assert adj.is_empty() and updates == []
    assert p.state.members.get(side.id) is None
    adj, _ = p.create_container(pd, main)
    assert adj.cpuset_cpus is not None


def test_group_by_puts_a_group_in_one_balloon(tmp_path: Path) -> None:
    t = BalloonType(
        name="g",
        namespaces=("*",),
        group_by="${pod/namespace}",
        prefer_spreading_pods=True,
        prefer_new_balloons=True,
    )
    p = _policy(tmp_path, t)
    pools = {}
    for name, ns in (("a1", "a"), ("b1", "b"), ("a2", "a"), ("b2", "b")):
        pc = guaranteed(name, 500, namespace=ns)
        p.create_container(*pc)
        a = p.state.members.get(pc[1].id)
        assert a is not None
        pools[name] = a.pool
    # preferNewBalloons alone would give each pod its own balloon; the group comes first.
    assert pools["a1"] == pools["a2"] and pools["b1"] == pools["b2"]
    assert pools["a1"] != pools["b1"]


def test_hide_hyperthreads_type_and_annotation(tmp_path: Path) -> None:
    t = BalloonType(name="ht", namespaces=("ht",), hide_hyperthreads=True)
    rt = Runtime(_policy(tmp_path, t))
    ann = "hide-hyperthreads.resource-policy.nri.io/container.c1"
    pd = pod("p", "guaranteed", namespace="ht", annotations={ann: "false"})
    c0 = rt.create((pd, container(pd, "c0", 2000, 2000)))
    c1 = rt.create((pd, container(pd, "c1", 2000, 2000)))
    # The balloon has 4 CPUs on 2 cores: c0 sees one thread of each, c1 (opted out) all.
    all_cpus = CpuSet.parse(rt.cpus[c1.id] or "")
    no_ht = CpuSet.parse(rt.cpus[c0.id] or "")
    assert len(all_cpus) == 4 and len(no_ht) == 2 and no_ht.issubset(all_cpus)


def test_memory_preserve_keeps_mems(tmp_path: Path) -> None:
    p = _policy(tmp_path)
    ann = {"memory.preserve.resource-policy.nri.io": "true"}
    pd = pod("m", "guaranteed", annotations=ann)
    c = container(pd, "c0", 1000, 1000)
    c = attrs.evolve(c, resources=attrs.evolve(c.resources or Resources(), cpuset_mems="3"))
    adj, _ = p.create_container(pd, c)
    assert adj.cpuset_cpus is not None and adj.cpuset_mems == "3"
    other = guaranteed("o", 1000)
    adj2, _ = p.create_container(*other)
    assert adj2.cpuset_mems not in (None, "3")


def test_prefer_close_to_a_pci_device_from_sysfs(tmp_path: Path) -> None:
    dev = tmp_path / "sys/devices/pci0000:00/0000:00:1f.6"
    dev.mkdir(parents=True)
    (dev / "local_cpulist").write_text("8-11\n")
    net = tmp_path / "sys/class/net/eth0"
    net.mkdir(parents=True)
    (net / "device").symlink_to(dev)
    nic = BalloonType(
        name="nic", namespaces=("nic",), prefer_close_to_devices=("/sys/class/net/eth0",)
    )
    rt = Runtime(_policy(tmp_path, nic))
    near = rt.create(guaranteed("n", 2000, namespace="nic"))
    other = rt.create(guaranteed("o", 2000))
    assert CpuSet.parse(rt.cpus[near.id] or "").issubset(CpuSet.parse("8-11"))
    # The others keep away from the CPUs a type prefers, while they can.
    assert CpuSet.parse(rt.cpus[other.id] or "").isdisjoint(CpuSet.parse("8-11"))
