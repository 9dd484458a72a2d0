"""No silent no-ops on topology-aware: ``defaultCPUPriority`` steers exclusive CPUs, and the
memory constraints and the annotations the policy does not act on are said, once each."""

from __future__ import annotations

import logging
from pathlib import Path

import attrs
import pytest

from nri_resmgr.config.models import Constraints
from nri_resmgr.config.notapplied import _reported
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from nri_resmgr.resmgr.policy import PolicyEnv
from nri_resmgr.sim.synthetic import N4C16, write_sysfs
from nri_resmgr.sim.synthetic_cpu import write_cpufreq
from tests.policies.workload import Runtime, guaranteed, topology_spec

D = "resource-policy.nri.io"
FAST, SLOW = "0-1,4-5,8-9,12-13", "2-3,6-7,10-11,14-15"


@pytest.fixture(autouse=True)
def _fresh() -> None:
    _reported.clear()


def _runtime(root: Path, **kw: object) -> Runtime:
    write_sysfs(root, N4C16)
    write_cpufreq(root, {FAST: 3000000, SLOW: 2000000})
    policy = TopologyAwarePolicy()
    policy.setup(topology_spec(**kw), PolicyEnv(host_root=str(root)))
    return Runtime(policy)


def _core_in_node(cpus: CpuSet) -> str:
    node = next(n for n in range(4) if cpus.issubset(CpuSet(range(4 * n, 4 * n + 4))))
    return str(CpuSet(c - 4 * node for c in cpus))


@pytest.mark.parametrize(
    ("default", "annotation", "expected"),
    [("none", None, "0"), ("low", None, "2"), ("high", None, "0"), ("low", "high", "0"),
     ("low", "bogus", "2")],
)  # fmt: skip
def test_default_cpu_priority_applies_when_not_annotated(
    tmp_path: Path, default: str, annotation: str | None, expected: str
) -> None:
    # In each node the first core is fast (3 GHz base), the second slow: the config's
    # default priority picks the core unless the pod's annotation (a valid one) says.
    rt = _runtime(tmp_path, default_cpu_priority=default)
    ann = {} if annotation is None else {f"prefer-cpu-priority.{D}/pod": annotation}
    c = rt.create(guaranteed("g", 1000, annotations=ann))
    assert _core_in_node(CpuSet.parse(rt.cpus[c.id] or "")) == expected


def test_memory_constraints_are_said_not_applied_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_sysfs(tmp_path, N4C16)
    spec = attrs.evolve(topology_spec(), reserved_resources=Constraints.of(cpu="750m", memory="1G"))
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            TopologyAwarePolicy().setup(spec, PolicyEnv(host_root=str(tmp_path)))
    said = [r.getMessage() for r in caplog.records if "accepted, not applied" in r.getMessage()]
    assert len(said) == 1
    assert said[0].startswith("spec.reservedResources.memory: accepted, not applied by ")


def test_unread_annotations_are_said_once_per_key(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rt = _runtime(tmp_path)
    ann = {
        f"cold-start.{D}/container.c0": "{duration: 0s}",
        f"rdtclass.{D}/pod": "gold",
        "noderesource.dev/resources": "",
        f"prefer-shared-cpus.{D}/pod": "true",  # read by the policy: not reported
    }
    with caplog.at_level(logging.WARNING):
        rt.create(guaranteed("a", 1000, annotations=ann))
        rt.create(guaranteed("b", 1000, annotations=ann))
    said = sorted(
        r.getMessage().split(":")[0]
        for r in caplog.records
        if "accepted, not applied" in r.getMessage()
    )
    assert said == [f"cold-start.{D}", "noderesource.dev/resources", f"rdtclass.{D}"]
