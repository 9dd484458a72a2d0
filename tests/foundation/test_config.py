"""Configuration models: loading every kind, the three DRA states, and the bad-config corpus."""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_resmgr.config import dump_document, load_document, load_file
from nri_resmgr.config.documents import parse_yaml
from nri_resmgr.config.loader import structure_spec, unstructure_spec
from nri_resmgr.config.models import (
    BalloonsSpec,
    TemplateSpec,
    TopologyAwareSpec,
)
from nri_resmgr.errors import ConfigError

CONFIGS = Path(__file__).parent / "configs"


@pytest.mark.parametrize(
    ("name", "cls", "policy"),
    [
        ("template.yaml", TemplateSpec, "template"),
        ("topology-aware.yaml", TopologyAwareSpec, "topology-aware"),
        ("balloons.yaml", BalloonsSpec, "balloons"),
    ],
)
def test_every_policy_kind_loads_from_yaml(name: str, cls: type, policy: str) -> None:
    doc = load_file(CONFIGS / name)
    assert isinstance(doc.spec, cls)
    assert doc.policy_name == policy
    assert doc.name == "default"


def test_topology_aware_values_reach_the_model() -> None:
    spec = load_file(CONFIGS / "topology-aware.yaml").spec
    assert isinstance(spec, TopologyAwareSpec)
    assert spec.reserved_resources.cpu.text == "750m"
    assert spec.available_resources.cpu.text == "exclude-cpuset:0"
    assert spec.reserved_pool_namespaces == ("monitoring", "kube-*")
    assert spec.default_cpu_priority == "normal"
    assert spec.log.klog.skip_headers is True
    assert spec.instrumentation.http_endpoint == ":8891"
    assert spec.dra.enabled is True


def test_balloon_types_keep_their_acronym_keys() -> None:
    spec = load_file(CONFIGS / "balloons.yaml").spec
    assert isinstance(spec, BalloonsSpec)
    shared = spec.balloon_types[1]
    assert (shared.min_cpus, shared.max_cpus, shared.max_balloons) == (1, 8, 2)
    assert shared.share_idle_cpus_in_same == "package"
    assert spec.balloon_types[0].allocator_priority == "high"
    dumped = unstructure_spec(spec)
    assert dumped["balloonTypes"][1]["minCPUs"] == 1
    assert dumped["balloonTypes"][1]["shareIdleCPUsInSame"] == "package"


@pytest.mark.parametrize(
    ("text", "expected"), [("", None), ("enabled: false", False), ("enabled: true", True)]
)
def test_dra_enabled_three_states_survive_round_trip(text: str, expected: bool | None) -> None:
    raw = parse_yaml(f"reservedResources: {{cpu: 750m}}\ndra: {{{text}}}\n")
    spec = structure_spec(raw, "TopologyAwarePolicy")
    assert spec.dra.enabled is expected
    dumped = unstructure_spec(spec)
    # Unset stays unset (absent), false stays an explicit false.
    if expected is None:
        assert "enabled" not in dumped.get("dra", {})
    else:
        assert dumped["dra"]["enabled"] is expected
    again = structure_spec(dumped, "TopologyAwarePolicy")
    assert again == spec
    assert again.dra.enabled is expected


def test_whole_document_round_trip() -> None:
    for name in ("template.yaml", "topology-aware.yaml", "balloons.yaml"):
        doc = load_file(CONFIGS / name)
        assert load_document(dump_document(doc)).spec == doc.spec


BAD = {
    "wrong-bool": "spec.dra.enabled: expected a boolean, got 'yes'",
    "unknown-key": "spec.pinCPUs: unknown key",
    "unknown-nested-key": "spec.dra.enabeld: unknown key",
    "wrong-kind": "kind: unknown policy kind 'FancyPolicy'",
    "wrong-api-version": "apiVersion: expected 'config.nri/v1alpha1', got 'config.nri/v1'",
    "bad-yaml": "invalid YAML at line 5",
    "wrong-int": "spec.balloonTypes[0].maxCPUs: expected an integer, got 'many'",
    "wrong-list": "spec.reservedPoolNamespaces: expected a list, got 'monitoring'",
    "missing-reserved": "spec.reservedResources: required key missing",
    "bad-cpu-quantity": "spec.reservedResources.cpu: expected a CPU quantity",
    "bad-enum": "spec.defaultCPUPriority: expected one of 'high', 'normal', 'low', 'none', "
    "got 'urgent'",
    "duplicate-balloon": "spec.balloonTypes[1].name: duplicate balloon type 'a'",
    "spec-not-mapping": "spec: expected a mapping, got a list",
    "balloon-missing-name": "spec.balloonTypes[0].name: required key missing",
}


def test_bad_corpus_is_complete() -> None:
    assert {p.stem for p in (CONFIGS / "bad").glob("*.yaml")} == set(BAD)


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_config_names_the_path(name: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_file(CONFIGS / "bad" / f"{name}.yaml")
    assert any(BAD[name] in line for line in info.value.errors), info.value.errors


def test_every_problem_is_reported_not_just_the_first() -> None:
    raw = parse_yaml("reservedResources: {cpu: 1}\npinCPU: 1\npinMemory: 'no'\nbogus: 3\n")
    with pytest.raises(ConfigError) as info:
        structure_spec(raw, "TopologyAwarePolicy")
    assert sorted(info.value.errors) == [
        "spec.bogus: unknown key",
        "spec.pinCPU: expected a boolean, got 1",
        "spec.pinMemory: expected a boolean, got 'no'",
    ]


def test_integers_are_not_booleans_and_booleans_not_integers() -> None:
    with pytest.raises(ConfigError, match=r"minCPUs: expected an integer, got True"):
        structure_spec(
            parse_yaml("reservedResources: {cpu: 1}\nballoonTypes: [{name: a, minCPUs: true}]"),
            "BalloonsPolicy",
        )


def test_cpu_quantity_may_be_an_unquoted_integer() -> None:
    spec = structure_spec(parse_yaml("reservedResources: {cpu: 2}"), "TemplatePolicy")
    assert spec.reserved_resources.cpu.text == "2"


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_file(tmp_path / "nope.yaml")
