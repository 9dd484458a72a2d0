"""Every configuration example of upstream's balloons documentation and sample config loads
(the two with misspelt keys are refused, naming the key); some place as documented."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from nri_resmgr.config.loader import structure_spec
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.errors import ConfigError
from tests.policies.balloons.scenario import Scenario, disjoint
from tests.policies.workload import container

DATA = yaml.safe_load((Path(__file__).parent / "upstream_doc_examples.yaml").read_text())
EXAMPLES: dict[int, dict[str, Any]] = {e["block"]: e["spec"] for e in DATA["examples"]}
# Keys the examples misspell. Upstream's API server prunes unknown keys silently; the
# project refuses them with the key's path (a typo must not pass for a setting).
MISSPELT = {29: "maxBallons", 33: "pinCPUs"}
# Fragments that refer to a part the example leaves out; upstream refuses them as well.
INCOMPLETE = {10: "unknown load class 'avx-compute'"}


def _complete(spec: dict[str, Any]) -> dict[str, Any]:
    # Fragments omit the required reservedResources.
    return {"reservedResources": {"cpu": "1"}, **spec}


@pytest.mark.parametrize("block", sorted(EXAMPLES))
def test_doc_example_loads(block: int) -> None:
    spec = _complete(EXAMPLES[block])
    if block in INCOMPLETE:
        with pytest.raises(ConfigError, match=INCOMPLETE[block]):
            structure_spec(spec, "BalloonsPolicy")
        return
    if block in MISSPELT:
        with pytest.raises(ConfigError, match=MISSPELT[block]):
            structure_spec(spec, "BalloonsPolicy")
        spec = dict(spec)
        bad = MISSPELT[block]
        spec.pop(bad, None)
        for t in spec.get("balloonTypes", []):
            t.pop(bad, None)
    structure_spec(spec, "BalloonsPolicy")


def test_sample_config_loads() -> None:
    structure_spec(DATA["sample_config"], "BalloonsPolicy")


def test_doc_match_expressions_by_name_and_label(tmp_path: Path) -> None:
    s = Scenario(tmp_path, {"balloonTypes": EXAMPLES[1]["balloonTypes"]})
    s.create()  # pod0: no match, default
    s.create(labels={"priority": "critical"}, cpureq="1", cpulim="1")  # pod1
    types = {a.name.split("/")[1]: a.pool for a in s.policy.state.members}
    assert types == {"pod0": "default[0]", "pod1": "latency-critical[0]"}


def test_doc_group_by_app_instance(tmp_path: Path) -> None:
    bt = {**EXAMPLES[3]["balloonTypes"][0], "namespaces": ["*"], "preferNewBalloons": True}
    s = Scenario(tmp_path, {"balloonTypes": [bt]})
    for app, inst in (("a", "1"), ("a", "2"), ("a", "1")):
        s.create(labels={"app": app, "instance": inst}, cpureq="1", cpulim="1")
    c = s.cpus
    assert c["pod0c0"] == c["pod2c0"] and disjoint(c["pod0c0"], c["pod1c0"])


def test_doc_hide_hyperthreads(tmp_path: Path) -> None:
    bt = {**EXAMPLES[18]["balloonTypes"][0], "namespaces": ["*"]}
    s = Scenario(tmp_path, {"balloonTypes": [bt]})
    s.create(cpureq="2", cpulim="2")
    cpus = s.cpus["pod0c0"]
    threads = s.policy.system.cpus
    assert len(cpus) == 1 or all(len(threads[c].threads & cpus) == 1 for c in cpus)


def test_doc_preserve_by_name(tmp_path: Path) -> None:
    s = Scenario(tmp_path, {"preserve": EXAMPLES[31]["preserve"]})
    s.create(cpureq="1", cpulim="1")
    assert len(s.cpus["pod0c0"]) < 16  # not preserved: pinned
    # The scenario names containers podNcM; a container named as in the example:
    p, _ = s.pods["pod0"]
    analyzer = container(p, "analyzer", 1000, 1000)
    adjustment, _ = s.policy.create_container(p, analyzer)
    assert adjustment.is_empty()


def test_doc_own_cpus_before_reserved(tmp_path: Path) -> None:
    spec = {k: v for k, v in EXAMPLES[28].items() if k != "reservedResources"}
    s = Scenario(tmp_path, {**spec, "reservedResources": {"cpu": "cpuset:0,8"}})
    s.create(namespace="kube-system", labels={"priority": "high"}, cpureq="1", cpulim="1")
    s.create(namespace="kube-system")
    c = s.cpus
    # pod0 (priority=high) matches own-cpus, listed before reserved: CPUs of its own.
    assert disjoint(c["pod0c0"], CpuSet([0, 8]))
    owner = {a.name.split("/")[1]: a.pool for a in s.policy.state.members}
    assert owner == {"pod0": "own-cpus[0]", "pod1": "reserved[0]"}
    reserved = s.policy.state.by_name("reserved[0]")
    assert reserved is not None and reserved.cpus == CpuSet([0, 8])
    # shareIdleCPUsInSame: numa: pod1 also runs on the idle CPUs of nodes 0 and 2.
    assert CpuSet([0, 8]).issubset(c["pod1c0"]) and c["pod1c0"] != CpuSet([0, 8])
    assert disjoint(c["pod1c0"], c["pod0c0"])
