"""Cross-field rules of config/validate.py, each with its exact message and its boundary.
(Written to kill the mutants `nox -s mutation` found surviving in config/validate.py.)"""

from __future__ import annotations

import pytest

from nri_resmgr.config.documents import parse_yaml
from nri_resmgr.config.loader import structure_spec
from nri_resmgr.errors import ConfigError

RESERVED = "reservedResources: {cpu: 750m}\n"


def problems(body: str, kind: str = "BalloonsPolicy") -> list[str]:
    try:
        structure_spec(parse_yaml(body), kind)
    except ConfigError as exc:
        return sorted(exc.errors)
    return []


def balloon(**fields: int) -> str:
    items = ", ".join(f"{k}: {v}" for k, v in {"name": "a", **fields}.items())
    return RESERVED + f"balloonTypes: [{{{items}}}]\n"


BT = "spec.balloonTypes[0]"


@pytest.mark.parametrize(
    "fields, expected",
    [
        ({"minCPUs": 2, "maxCPUs": 1}, [f"{BT}: minCPUs (2) exceeds maxCPUs (1)"]),
        ({"minCPUs": 1, "maxCPUs": 1}, []),
        ({"minCPUs": 5}, []),  # maxCPUs 0: no upper bound
        ({"minCPUs": -1}, [f"{BT}: minCPUs, minBalloons and maxBalloons must not be negative"]),
        ({"minBalloons": -1}, [f"{BT}: minCPUs, minBalloons and maxBalloons must not be negative"]),
        ({"maxBalloons": -1}, [f"{BT}: minCPUs, minBalloons and maxBalloons must not be negative"]),
        ({"minBalloons": 2, "maxBalloons": 1}, [f"{BT}: minBalloons (2) exceeds maxBalloons (1)"]),
        ({"minBalloons": 2, "maxBalloons": 2}, []),
        ({"minBalloons": 3}, []),  # maxBalloons 0: no upper bound
    ],
)
def test_balloon_type_bounds(fields: dict[str, int], expected: list[str]) -> None:
    assert problems(balloon(**fields)) == expected


def test_an_empty_balloon_name_is_refused_by_name() -> None:
    assert problems(RESERVED + "balloonTypes: [{name: ''}]\n") == [f"{BT}.name: must not be empty"]


def test_memory_quantities() -> None:
    assert problems("reservedResources: {cpu: 1, memory: 1Gi}\n") == []
    assert problems("reservedResources: {cpu: 1, memory: lots}\n") == [
        "spec.reservedResources.memory: expected a memory quantity, got 'lots'"
    ]


def test_a_missing_reserved_cpu_is_named() -> None:
    assert problems("reservedResources: {memory: 1Gi}\n", "TemplatePolicy") == [
        "spec.reservedResources.cpu: required key missing"
    ]


def test_available_resources_problems_carry_their_path() -> None:
    assert problems(RESERVED + "availableResources: {cpu: 'cpuset:x'}\n", "TemplatePolicy") == [
        "spec.availableResources.cpu: invalid CPU list 'x' in 'cpuset:x'"
    ]


@pytest.mark.parametrize(
    "export, exporter, refused",
    [
        ("true", "otlp-http", True),
        ("true", "''", False),
        ("true", "prometheus", False),
        ("false", "otlp-http", False),
    ],
)
def test_prometheus_export_conflicts_only_with_another_exporter(
    export: str, exporter: str, refused: bool
) -> None:
    inst = f"{{prometheusExport: {export}, metricsExporter: {exporter}}}"
    body = RESERVED + f"instrumentation: {inst}\n"
    expected = [
        "spec.instrumentation.prometheusExport: cannot be combined with metricsExporter 'otlp-http'"
    ]
    assert problems(body, "TemplatePolicy") == (expected if refused else [])


def test_a_bad_report_period_is_named() -> None:
    assert problems(RESERVED + "instrumentation: {reportPeriod: soon}\n", "TemplatePolicy") == [
        "spec.instrumentation.reportPeriod: expected a duration such as '30s', got 'soon'"
    ]


def test_balloon_problems_add_to_the_others() -> None:
    body = RESERVED + "instrumentation: {reportPeriod: soon}\nballoonTypes: [{name: ''}]\n"
    assert problems(body) == [
        f"{BT}.name: must not be empty",
        "spec.instrumentation.reportPeriod: expected a duration such as '30s', got 'soon'",
    ]


def test_a_quantity_problem_adds_to_the_other_problems_of_the_loader() -> None:
    # Quantities are parsed where the document is structured, with the key types.
    body = "reservedResources: {cpu: 1, memory: lots}\npinCPU: yes\n"
    assert problems(body) == [
        "spec.pinCPU: expected a boolean, got 'yes'",
        "spec.reservedResources.memory: expected a memory quantity, got 'lots'",
    ]
