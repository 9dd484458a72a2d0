"""The loader's messages and the document metadata it keeps, exactly.
(Written to kill the mutants `nox -s mutation` found surviving in config/loader.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from nri_resmgr.config.documents import dump_document, load_document, parse_yaml
from nri_resmgr.config.loader import structure_spec
from nri_resmgr.errors import ConfigError

SPEC = {"reservedResources": {"cpu": "750m"}}


def doc(**extra: Any) -> dict[str, Any]:
    return {"apiVersion": "config.nri/v1alpha1", "kind": "TemplatePolicy", **extra}


def errors_of(data: Any) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_document(data)
    return list(info.value.errors)


def spec_errors(body: str, kind: str = "TopologyAwarePolicy") -> list[str]:
    with pytest.raises(ConfigError) as info:
        structure_spec(parse_yaml(body), kind)
    return sorted(info.value.errors)


def test_metadata_is_kept_field_by_field() -> None:
    meta = {"name": "n", "namespace": "ns", "uid": "u-1", "generation": 3, "resourceVersion": "7"}
    d = load_document(doc(metadata=meta, spec=SPEC))
    assert (d.name, d.namespace, d.uid, d.generation, d.resource_version) == (
        "n", "ns", "u-1", 3, "7",
    )  # fmt: skip
    bare = load_document(doc(spec=SPEC))
    assert (bare.name, bare.namespace, bare.uid, bare.generation) == ("", "", "", 0)
    assert dump_document(d)["metadata"] == {"name": "n", "namespace": "ns"}


def test_document_level_problems_are_named() -> None:
    assert errors_of(doc(metadata=[1], spec=SPEC)) == ["metadata: expected a mapping, got a list"]
    assert errors_of(doc()) == ["spec: required key missing"]
    assert errors_of(doc(kind="X", spec=SPEC)) == [
        "kind: unknown policy kind 'X' (expected one of BalloonsPolicy, TemplatePolicy, "
        "TopologyAwarePolicy)"
    ]


def test_values_of_the_wrong_shape_are_described() -> None:
    assert spec_errors("reservedResources: {cpu: [1]}\n") == [
        "spec.reservedResources.cpu: expected a quantity or cpuset string, got a list"
    ]
    assert spec_errors("reservedResources: {cpu: 1}\npinCPU: {a: 1}\n") == [
        "spec.pinCPU: expected a boolean, got a mapping"
    ]
    assert spec_errors("reservedResources: {cpu: 1}\nreservedPoolNamespaces: [1]\n") == [
        "spec.reservedPoolNamespaces[0]: expected a string, got 1"
    ]


def test_yaml_errors_give_line_and_column_counted_from_one() -> None:
    # The ':' after "b" (line 2, second character) is where the flow list breaks.
    with pytest.raises(ConfigError) as info:
        parse_yaml("a: [1, 2\nb: c\n", "f.yaml")
    assert info.value.errors == [
        "f.yaml: invalid YAML at line 2, column 2: expected ',' or ']', but got ':'"
    ]
