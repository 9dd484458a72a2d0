"""The loader's converter, value by value: what it accepts, what it refuses, and the one line
per problem that names the key as the user wrote it (camelCase, list indexes).

Expected messages are the loader's contract (module docstring of ``config/loader.py``):
``<path>: expected <kind>, got <value>``, every problem reported, none silently coerced.
"""

from __future__ import annotations

from typing import Any, Literal

import pytest

from nri_resmgr.config.converter import (
    ValueProblem,
    _is_homogeneous_tuple,
    _literal_hook,
    converter,
)
from nri_resmgr.config.documents import parse_yaml
from nri_resmgr.config.loader import structure_spec, unstructure_spec
from nri_resmgr.config.models import (
    BalloonsSpec,
    Constraints,
    KlogConfig,
    TemplateSpec,
    TopologyAwareSpec,
)
from nri_resmgr.config.problems import problems as problem_lines
from nri_resmgr.errors import ConfigError

RESERVED = "reservedResources: {cpu: 750m}\n"


def problems(body: str, kind: str = "TemplatePolicy") -> list[str]:
    with pytest.raises(ConfigError) as info:
        structure_spec(parse_yaml(body), kind)
    return sorted(info.value.errors)


def template(body: str = "") -> TemplateSpec:
    spec = structure_spec(parse_yaml(RESERVED + body), "TemplatePolicy")
    assert isinstance(spec, TemplateSpec)
    return spec


def test_the_converter_is_built_once_and_reused() -> None:
    assert converter() is converter()


# -- leaves: booleans, integers, strings are never coerced --------------------------------


@pytest.mark.parametrize(
    ("value", "shown"),
    [("1", "1"), ("'true'", "'true'"), ("[true]", "a list"), ("{a: 1}", "a mapping")],
)
def test_a_boolean_is_only_true_or_false(value: str, shown: str) -> None:
    assert problems(f"{RESERVED}dra: {{enabled: {value}}}\n") == [
        f"spec.dra.enabled: expected a boolean, got {shown}"
    ]


def test_booleans_load_as_written() -> None:
    assert template("dra: {enabled: false}\n").dra.enabled is False
    assert template("dra: {enabled: true}\n").dra.enabled is True


@pytest.mark.parametrize(
    ("value", "shown"), [("true", "True"), ("'3'", "'3'"), ("1.5", "1.5"), ("[3]", "a list")]
)
def test_an_integer_is_only_an_integer(value: str, shown: str) -> None:
    assert problems(f"{RESERVED}log: {{klog: {{v: {value}}}}}\n") == [
        f"spec.log.klog.v: expected an integer, got {shown}"
    ]


def test_integers_load_as_written() -> None:
    assert template("log: {klog: {v: 4}}\n").log.klog.v == 4
    assert template("log: {klog: {v: 0}}\n").log.klog.v == 0


@pytest.mark.parametrize(
    ("value", "shown"), [("7", "7"), ("true", "True"), ("{a: b}", "a mapping")]
)
def test_a_string_is_only_a_string(value: str, shown: str) -> None:
    assert problems(f"{RESERVED}log: {{debug: [{value}]}}\n") == [
        f"spec.log.debug[0]: expected a string, got {shown}"
    ]


def test_yaml_1_1_booleans_stay_strings() -> None:
    # ``yes``/``on`` would be True under YAML 1.1; here they are strings, so refused as booleans.
    assert parse_yaml("[yes, no, on, off, y, True, FALSE, true]") == [
        "yes", "no", "on", "off", "y", True, False, True,
    ]  # fmt: skip
    assert problems(f"{RESERVED}dra: {{enabled: on}}\n") == [
        "spec.dra.enabled: expected a boolean, got 'on'"
    ]


# -- literals (enumerations) --------------------------------------------------------------


def test_a_literal_names_every_choice() -> None:
    assert problems(f"{RESERVED}instrumentation: {{tracingCollector: otlp}}\n") == [
        "spec.instrumentation.tracingCollector: expected one of '', 'otlp-http', 'otlp-grpc', "
        "got 'otlp'"
    ]
    spec = template("instrumentation: {tracingCollector: otlp-grpc}\n")
    assert spec.instrumentation.tracing_collector == "otlp-grpc"


def test_a_literal_value_must_also_have_the_choices_type() -> None:
    # True == 1 in Python: without the type check a boolean would pass for the integer 1.
    hook = _literal_hook(Literal[1, 2])
    assert hook(2, None) == 2
    with pytest.raises(ValueProblem, match=r"^expected one of 1, 2, got True$"):
        hook(True, None)
    mixed = _literal_hook(Literal["a", 1])
    assert (mixed("a", None), mixed(1, None)) == ("a", 1)
    with pytest.raises(ValueProblem, match=r"^expected one of 'a', 1, got True$"):
        mixed(True, None)


# -- optionals and lists ------------------------------------------------------------------


def test_an_optional_value_may_be_null_and_is_else_checked() -> None:
    assert template("dra: {enabled: null}\n").dra.enabled is None
    assert template("log: {klog: {v: null}}\n").log.klog.v is None
    assert problems(f"{RESERVED}log: {{klog: {{v: x}}}}\n") == [
        "spec.log.klog.v: expected an integer, got 'x'"
    ]


def test_a_list_is_required_where_a_list_is_expected() -> None:
    assert problems(f"{RESERVED}log: {{debug: all}}\n") == [
        "spec.log.debug: expected a list, got 'all'"
    ]
    assert problems(f"{RESERVED}log: {{debug: {{a: 1}}}}\n") == [
        "spec.log.debug: expected a list, got a mapping"
    ]
    assert template("log: {debug: [a, b]}\n").log.debug == ("a", "b")
    assert template("log: {debug: []}\n").log.debug == ()


def test_every_bad_list_item_is_named_by_its_index() -> None:
    assert problems(f"{RESERVED}log: {{debug: [a, 1, b, false]}}\n") == [
        "spec.log.debug[1]: expected a string, got 1",
        "spec.log.debug[3]: expected a string, got False",
    ]


def test_nested_lists_of_models_give_the_full_path() -> None:
    body = f"{RESERVED}balloonTypes: [{{name: a}}, {{name: b, minCPUs: x, pinMemory: 2}}]\n"
    assert problems(body, "BalloonsPolicy") == [
        "spec.balloonTypes[1].minCPUs: expected an integer, got 'x'",
        "spec.balloonTypes[1].pinMemory: expected a boolean, got 2",
    ]


# -- models: mappings only, unknown keys refused, keys as the CRD spells them --------------


@pytest.mark.parametrize(("value", "shown"), [("[1]", "a list"), ("on", "'on'"), ("3", "3")])
def test_a_section_must_be_a_mapping(value: str, shown: str) -> None:
    assert problems(f"{RESERVED}dra: {value}\n") == [f"spec.dra: expected a mapping, got {shown}"]


def test_unknown_keys_are_refused_at_every_level() -> None:
    assert problems(f"{RESERVED}log: {{klog: {{v: 1, verbose: 2}}}}\n") == [
        "spec.log.klog.verbose: unknown key"
    ]
    assert problems(
        f"{RESERVED}balloonTypes: [{{name: a, pinCPUs: true}}]\n", "BalloonsPolicy"
    ) == ["spec.balloonTypes[0].pinCPUs: unknown key"]


def test_a_long_unknown_key_is_shortened() -> None:
    key = "k" * 100
    assert problems(f"{RESERVED}{key}: 1\n") == [f"spec.{'k' * 60}… (100 characters): unknown key"]


def test_keys_are_the_crd_spelling_not_the_attribute_name() -> None:
    # snake_case attribute names are not keys; explicit keys (skip_headers) are kept as is.
    assert problems(f"{RESERVED}reserved_pool_namespaces: [a]\n", "TopologyAwarePolicy") == [
        "spec.reserved_pool_namespaces: unknown key"
    ]
    spec = template("log: {klog: {skip_headers: true}}\n")
    assert spec.log.klog == KlogConfig(skip_headers=True)
    assert problems(f"{RESERVED}log: {{klog: {{skipHeaders: true}}}}\n") == [
        "spec.log.klog.skipHeaders: unknown key"
    ]
    ta = structure_spec(parse_yaml(RESERVED + "reservedPoolNamespaces: [a]"), "TopologyAwarePolicy")
    assert isinstance(ta, TopologyAwareSpec)
    assert ta.reserved_pool_namespaces == ("a",)


def test_a_missing_required_key_is_named() -> None:
    assert problems(f"{RESERVED}balloonTypes: [{{minCPUs: 1}}]\n", "BalloonsPolicy") == [
        "spec.balloonTypes[0].name: required key missing"
    ]


# -- resource constraints (reservedResources / availableResources) ------------------------


def test_constraints_take_quantities_as_strings_or_integers() -> None:
    spec = structure_spec(
        parse_yaml("reservedResources: {cpu: 2, memory: 1Gi}\navailableResources: {cpu: '4'}"),
        "TemplatePolicy",
    )
    assert spec.reserved_resources == Constraints.of(cpu="2", memory="1Gi")
    assert spec.available_resources == Constraints.of(cpu="4", memory=None)


def test_every_bad_constraint_is_named() -> None:
    assert problems("reservedResources: {cpu: true, memory: [1]}\n") == [
        "spec.reservedResources.cpu: expected a quantity or cpuset string, got True",
        "spec.reservedResources.memory: expected a quantity or cpuset string, got a list",
    ]
    assert problems("reservedResources: {cpu: 1, memory: 1.5}\n") == [
        "spec.reservedResources.memory: expected a quantity or cpuset string, got 1.5"
    ]


def test_constraints_must_be_a_mapping_without_unknown_keys() -> None:
    assert problems("reservedResources: 2\n") == [
        "spec.reservedResources: expected a mapping, got 2"
    ]
    assert problems("reservedResources: {cpu: 1, gpu: 1, CPU: 2}\n") == [
        "spec.reservedResources.CPU: unknown key",
        "spec.reservedResources.gpu: unknown key",
    ]


# -- writing back -------------------------------------------------------------------------


def test_unstructuring_omits_defaults_and_writes_lists_and_crd_keys() -> None:
    spec = structure_spec(
        parse_yaml(RESERVED + "balloonTypes: [{name: a, minCPUs: 2, namespaces: [x]}]"),
        "BalloonsPolicy",
    )
    assert isinstance(spec, BalloonsSpec)
    dumped: dict[str, Any] = unstructure_spec(spec)
    assert dumped == {
        "reservedResources": {"cpu": "750m"},
        "balloonTypes": [{"name": "a", "minCPUs": 2, "namespaces": ["x"]}],
    }
    assert structure_spec(dumped, "BalloonsPolicy") == spec


# -- which types get the strict hooks -----------------------------------------------------


def test_only_tuples_of_one_repeated_type_are_lists() -> None:
    assert _is_homogeneous_tuple(tuple[str, ...])
    assert not _is_homogeneous_tuple(tuple[str, int])
    assert not _is_homogeneous_tuple(tuple[str])
    assert not _is_homogeneous_tuple(list[str])
    assert not _is_homogeneous_tuple(str)


def test_a_problem_line_is_bounded() -> None:
    [line] = problem_lines(ValueError("x" * 400), "spec.a")
    assert line == f"spec.a: {'x' * 300}… (400 characters)"
