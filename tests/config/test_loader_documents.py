"""Whole documents: the checks before the spec (apiVersion, kind, top-level keys, metadata),
the metadata kept, YAML and file errors, and what is written back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from nri_resmgr.config.documents import (
    MAX_YAML_DEPTH,
    dump_document,
    load_document,
    load_file,
    parse_yaml,
)
from nri_resmgr.config.loader import structure_spec
from nri_resmgr.config.models import PolicyDocument, TemplateSpec
from nri_resmgr.errors import ConfigError

API = "config.nri/v1alpha1"
SPEC = {"reservedResources": {"cpu": "750m"}}


def doc(**fields: Any) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "TemplatePolicy", "spec": SPEC, **fields}


def refused(data: Any) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_document(data)
    return list(info.value.errors)


@pytest.mark.parametrize(("data", "shown"), [([1], "a list"), ("x", "'x'"), (None, "None")])
def test_a_document_must_be_a_mapping(data: Any, shown: str) -> None:
    assert refused(data) == [f"document: expected a mapping, got {shown}"]


def test_the_api_version_is_checked_first() -> None:
    assert refused({"kind": "TemplatePolicy", "spec": SPEC}) == [
        f"apiVersion: expected {API!r}, got None"
    ]
    assert refused(doc(apiVersion="v1", kind="Nope")) == [f"apiVersion: expected {API!r}, got 'v1'"]


def test_an_unknown_or_missing_kind_lists_the_known_ones() -> None:
    known = "BalloonsPolicy, TemplatePolicy, TopologyAwarePolicy"
    assert refused(doc(kind="Policy")) == [
        f"kind: unknown policy kind 'Policy' (expected one of {known})"
    ]
    data = doc()
    del data["kind"]
    assert refused(data) == [f"kind: unknown policy kind None (expected one of {known})"]
    with pytest.raises(ConfigError) as info:
        structure_spec(SPEC, "Policy")
    assert info.value.errors == [f"kind: unknown policy kind 'Policy' (expected one of {known})"]


def test_status_and_metadata_are_allowed_at_the_top_and_nothing_else() -> None:
    assert load_document(doc(status={"x": 1}, metadata={"name": "a"})).name == "a"
    assert refused(doc(Spec={}, status={})) == ["Spec: unknown key"]
    assert refused(doc(**{"z" * 80: 1})) == [f"{'z' * 60}… (80 characters): unknown key"]


def test_metadata_may_be_absent_or_null_but_not_another_type() -> None:
    for data in (doc(), doc(metadata=None), doc(metadata={})):
        d = load_document(data)
        assert (d.name, d.namespace, d.uid, d.generation, d.resource_version) == ("", "", "", 0, "")
    assert refused(doc(metadata="default")) == ["metadata: expected a mapping, got 'default'"]


def test_the_metadata_kept_is_the_documents() -> None:
    meta = {"name": "n", "namespace": "ns", "uid": "u", "generation": 5, "resourceVersion": "42"}
    d = load_document(doc(metadata=meta))
    assert d == PolicyDocument(
        kind="TemplatePolicy",
        spec=TemplateSpec(**{"reserved_resources": d.spec.reserved_resources}),
        name="n",
        namespace="ns",
        uid="u",
        generation=5,
        resource_version="42",
    )
    assert d.spec.reserved_resources.cpu.text == "750m"


def test_a_generation_that_is_not_an_integer_counts_as_zero() -> None:
    assert load_document(doc(metadata={"generation": "5"})).generation == 0
    assert load_document(doc(metadata={"generation": 0})).generation == 0


def test_a_missing_or_bad_spec_is_named() -> None:
    data = doc()
    del data["spec"]
    assert refused(data) == ["spec: required key missing"]
    assert refused(doc(spec="x")) == ["spec: expected a mapping, got 'x'"]
    assert refused(doc(spec={})) == ["spec.reservedResources: required key missing"]
    assert refused(doc(spec={"reservedResources": {}})) == [
        "spec.reservedResources.cpu: required key missing"
    ]


def test_the_spec_is_bounded_before_it_is_structured() -> None:
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(30):
        node["a"] = {}
        node = node["a"]
    [problem] = refused(doc(spec={**SPEC, "control": {"rdt": deep}}))
    assert problem.endswith("nested deeper than 24 levels"), problem


def test_a_spec_found_elsewhere_is_named_by_its_own_path() -> None:
    # The bounds check and validation name the path the caller gives, not "spec".
    with pytest.raises(ConfigError) as info:
        structure_spec({"reservedResources": {"cpu": "lots"}}, "TemplatePolicy", "cr.spec")
    assert info.value.errors[0].startswith("cr.spec.reservedResources.cpu: expected a CPU")
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(30):
        node["a"] = {}
        node = node["a"]
    with pytest.raises(ConfigError) as info:
        structure_spec({**SPEC, "control": {"rdt": deep}}, "TemplatePolicy", "cr.spec")
    assert info.value.errors[0].startswith("cr.spec.control.rdt.a"), info.value.errors


def test_validation_runs_after_structuring() -> None:
    assert refused(doc(spec={"reservedResources": {"cpu": "lots"}})) == [
        "spec.reservedResources.cpu: expected a CPU quantity, cpuset:<list> or "
        "exclude-cpuset:<list>, got 'lots'"
    ]


# -- YAML ---------------------------------------------------------------------------------


def test_yaml_errors_name_the_source_and_position() -> None:
    with pytest.raises(ConfigError) as info:
        parse_yaml("a: b\n  c: d\n", "policy.yaml")
    assert info.value.errors == [
        "policy.yaml: invalid YAML at line 2, column 4: mapping values are not allowed here"
    ]
    with pytest.raises(ConfigError) as info:
        parse_yaml("a: [")
    assert info.value.errors[0].startswith("config: invalid YAML at line 1, column 5: ")


def test_a_yaml_error_without_a_position_still_says_what_is_wrong() -> None:
    # A character YAML forbids is found by the reader, whose error has no problem_mark.
    with pytest.raises(ConfigError) as info:
        parse_yaml("a: \x00", "nul.yaml")
    assert info.value.errors == [
        "nul.yaml: invalid YAML: unacceptable character #x0000: special characters are not "
        'allowed\n  in "<unicode string>", position 3'
    ]


@pytest.mark.parametrize("block", [False, True])
def test_yaml_nested_deeper_than_the_bound_is_refused_not_a_recursion_error(block: bool) -> None:
    def nest(depth: int) -> str:
        if block:
            # depth - 2 lists, the innermost item a null: depth - 1 nodes under the root
            return "a:\n" + "".join("  " * i + "- \n" for i in range(1, depth - 1))
        return "a: " + "[" * (depth - 1) + "]" * (depth - 1)

    assert parse_yaml(nest(MAX_YAML_DEPTH)) is not None  # the root mapping is one level
    for depth in (MAX_YAML_DEPTH + 1, 3000):
        with pytest.raises(ConfigError) as info:
            parse_yaml(nest(depth), "deep.yaml")
        [line] = info.value.errors
        assert line.startswith("deep.yaml: invalid YAML at line ")
        assert line.endswith(f": nested deeper than {MAX_YAML_DEPTH} levels")


def test_only_safe_yaml_is_read() -> None:
    with pytest.raises(ConfigError, match="invalid YAML"):
        parse_yaml("!!python/object/apply:os.system ['true']")


def test_numbers_and_nulls_are_yaml_1_2_like() -> None:
    assert parse_yaml("{a: 1, b: 1.5, c: null, d: ~, e: '1'}") == {
        "a": 1, "b": 1.5, "c": None, "d": None, "e": "1",
    }  # fmt: skip


# -- files and writing back ---------------------------------------------------------------


def test_a_file_is_read_parsed_and_loaded(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc(metadata={"name": "f"})))
    assert load_file(path).name == "f"
    assert load_file(str(path)).name == "f"
    path.write_text("apiVersion: [\n")
    with pytest.raises(ConfigError, match=rf"^{path}: invalid YAML at line 2"):
        load_file(path)


def test_an_unreadable_file_names_the_reason(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_file(tmp_path / "absent.yaml")
    assert info.value.errors == [
        f"{tmp_path / 'absent.yaml'}: cannot read config file: No such file or directory"
    ]
    with pytest.raises(ConfigError) as info:
        load_file(tmp_path)
    assert info.value.errors == [f"{tmp_path}: cannot read config file: Is a directory"]


def test_dump_writes_only_the_metadata_that_is_set() -> None:
    full = load_document(doc(metadata={"name": "n", "namespace": "ns", "uid": "u"}))
    assert dump_document(full) == {
        "apiVersion": API,
        "kind": "TemplatePolicy",
        "metadata": {"name": "n", "namespace": "ns"},
        "spec": SPEC,
    }
    assert dump_document(load_document(doc()))["metadata"] == {}
    only_ns = load_document(doc(metadata={"namespace": "ns"}))
    assert dump_document(only_ns)["metadata"] == {"namespace": "ns"}
    assert load_document(dump_document(full)) == load_document(
        doc(metadata={"name": "n", "namespace": "ns"})
    )
