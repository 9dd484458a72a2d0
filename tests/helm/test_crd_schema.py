"""The generated CRDs: fresh, structural, in agreement with the models, right about samples."""

from __future__ import annotations

import types
import typing
from typing import Any, get_args, get_origin, get_type_hints

import attrs
import pytest

from nri_resmgr.config.fields import key_of
from nri_resmgr.config.loader import structure_spec, unstructure_spec
from nri_resmgr.config.models import SPEC_BY_POLICY, Constraints
from nri_resmgr.config.values import VALUE_TYPES
from nri_resmgr.errors import ConfigError
from tests.helm.crds import CONFIGS, POLICIES, admit, committed_crd, load_sample, openapi
from tests.helm.structural import structural_problems, validate
from tools.gencrd import stale_files

# Bad samples a schema can catch, with a word the rejection must contain.
SCHEMA_REJECTS = {
    "bad-cpu-quantity.yaml": "does not match",
    "bad-enum.yaml": "is not one of",
    "balloon-missing-name.yaml": ".name: required",
    "duplicate-balloon.yaml": "duplicate entry",
    "missing-reserved.yaml": "reservedResources: required",
    "spec-not-mapping.yaml": "expected object",
    "unknown-key.yaml": "pinCPUs: unknown field",
    "unknown-nested-key.yaml": "enabeld: unknown field",
    "wrong-api-version.yaml": "is not served",
    "wrong-bool.yaml": "expected boolean",
    "wrong-int.yaml": "expected integer",
    "wrong-kind.yaml": "no CRD serves",
    "wrong-list.yaml": "expected array",
}
# Bad samples no schema can catch, and why.
NOT_SCHEMA = {"bad-yaml.yaml": "not YAML at all: the client fails before any request"}


def test_committed_chart_files_equal_freshly_generated() -> None:
    assert stale_files() == [], "run: python -m tools.gencrd"


@pytest.mark.parametrize("policy", POLICIES)
def test_crd_is_structural_and_named_as_nri_plugins(policy: str) -> None:
    crd = committed_crd(policy)
    kind = SPEC_BY_POLICY[policy].kind
    plural = {"topology-aware": "topologyawarepolicies", "balloons": "balloonspolicies"}.get(
        policy, "templatepolicies"
    )
    assert crd["metadata"]["name"] == f"{plural}.config.nri"
    assert crd["spec"]["names"] == {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": plural,
        "singular": kind.lower(),
    }
    assert crd["spec"]["scope"] == "Namespaced"
    (version,) = crd["spec"]["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}
    schema = openapi(crd)
    assert structural_problems(schema) == []
    assert schema["required"] == ["spec"]
    assert schema["properties"]["spec"]["required"] == ["reservedResources"]


@pytest.mark.parametrize("policy", POLICIES)
def test_status_schema_accepts_agent_reports(policy: str) -> None:
    status = openapi(committed_crd(policy))["properties"]["status"]
    report = {
        "nodes": {
            "n1": {
                "status": "Success",
                "generation": 3,
                "errors": "",
                "timestamp": "2026-12-02T10:00:00Z",
            },
            "n2": {"status": "Failure", "generation": 4, "errors": "spec.x: bad"},
        }
    }
    assert validate(report, status) == []
    assert validate({"nodes": {"n1": {"status": "Maybe"}}}, status) != []


@pytest.mark.parametrize("sample", ["topology-aware", "balloons", "template"])
def test_schema_accepts_good_samples(sample: str) -> None:
    document = load_sample(CONFIGS / f"{sample}.yaml")
    assert admit(document) == []


def _bad_samples() -> list[str]:
    return sorted(p.name for p in (CONFIGS / "bad").glob("*.yaml"))


def test_every_bad_sample_is_classified() -> None:
    assert set(_bad_samples()) == set(SCHEMA_REJECTS) | set(NOT_SCHEMA)


@pytest.mark.parametrize("name", sorted(SCHEMA_REJECTS))
def test_schema_rejects_bad_sample(name: str) -> None:
    problems = admit(load_sample(CONFIGS / "bad" / name))
    assert any(SCHEMA_REJECTS[name] in p for p in problems), problems


def test_cpu_pattern_agrees_with_loader() -> None:
    reserved = openapi(committed_crd("template"))["properties"]["spec"]["properties"][
        "reservedResources"
    ]
    good = ("750m", "2", 2, "1.5", "1.", "+2", "1e3", "2500u", "cpuset:0-3,8", "cpuset: 1, 3-4")
    for cpu in good:
        assert validate({"cpu": cpu}, reserved) == [], cpu
        structure_spec({"reservedResources": {"cpu": cpu}}, "TemplatePolicy")
    for cpu in ("lots", "cpuset:", "cpuset:a-b", "-1", "1x", " 2", "1e", "2 ", True):
        assert validate({"cpu": cpu}, reserved) != [], cpu
        with pytest.raises(ConfigError):
            structure_spec({"reservedResources": {"cpu": cpu}}, "TemplatePolicy")


def test_memory_pattern_agrees_with_loader() -> None:
    reserved = openapi(committed_crd("template"))["properties"]["spec"]["properties"][
        "reservedResources"
    ]
    for memory in ("1Gi", "512M", 1024, "1e9", "+1Ki", ".5Gi"):
        assert validate({"cpu": "1", "memory": memory}, reserved) == [], memory
        structure_spec({"reservedResources": {"cpu": "1", "memory": memory}}, "TemplatePolicy")
    for memory in ("lots", "1GB", "-1Gi", "cpuset:0"):
        assert validate({"cpu": "1", "memory": memory}, reserved) != [], memory
        with pytest.raises(ConfigError):
            structure_spec({"reservedResources": {"cpu": "1", "memory": memory}}, "TemplatePolicy")


# -- the schema and the models agree ------------------------------------------------------


def _model_paths(cls: type, prefix: str = "") -> dict[str, attrs.Attribute[Any]]:
    """Every config key path of a model (``a.b``, ``list[].c``, ``map{}.d``) → its field."""
    out: dict[str, attrs.Attribute[Any]] = {}
    hints = get_type_hints(cls)
    for attribute in attrs.fields(cls):
        path = f"{prefix}{key_of(attribute)}"
        out[path] = attribute
        out.update(_type_paths(hints[attribute.name], path))
    return out


def _type_paths(t: Any, path: str) -> dict[str, attrs.Attribute[Any]]:
    if get_origin(t) in (typing.Union, types.UnionType):
        options = [a for a in get_args(t) if a is not type(None)]
        if all(a in VALUE_TYPES for a in options):
            return {}  # one typed value (config/values.py), not a section of keys
        (t,) = options
    if t is Constraints or (isinstance(t, type) and attrs.has(t)):
        return _model_paths(t, path + ".")
    origin, args = get_origin(t), get_args(t)
    if origin is tuple:
        return _type_paths(args[0], path + "[]")
    if origin is dict and args[1] is not Any:
        return _type_paths(args[1], path + "{}")
    return {}


def _schema_paths(schema: dict[str, Any], prefix: str = "") -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for key, sub in schema.get("properties", {}).items():
        path = f"{prefix}{key}"
        out[path] = sub
        out.update(_schema_paths(sub, path + "."))
        if "items" in sub:
            out.update(_schema_paths(sub["items"], path + "[]."))
        if isinstance(sub.get("additionalProperties"), dict):
            out.update(_schema_paths(sub["additionalProperties"], path + "{}."))
    return out


def _spec_schema(policy: str) -> dict[str, Any]:
    schema: dict[str, Any] = openapi(committed_crd(policy))["properties"]["spec"]
    return schema


@pytest.mark.parametrize("policy", POLICIES)
def test_every_model_key_is_in_the_schema_and_back(policy: str) -> None:
    model = set(_model_paths(SPEC_BY_POLICY[policy]))
    schema = set(_schema_paths(_spec_schema(policy)))
    assert model - schema == set(), "model keys missing from the CRD"
    assert schema - model == set(), "CRD keys the model does not know"


@pytest.mark.parametrize("policy", POLICIES)
def test_schema_defaults_are_the_model_defaults(policy: str) -> None:
    fields = _model_paths(SPEC_BY_POLICY[policy])
    checked = 0
    for path, sub in _schema_paths(_spec_schema(policy)).items():
        default = fields[path].default
        if "default" in sub:
            expected = list(default) if isinstance(default, tuple) else default
            assert sub["default"] == expected, path
            checked += 1
        elif default is None:
            assert sub.get("nullable") or sub.get("x-kubernetes-int-or-string"), path
    assert checked > 10


def _example(schema: dict[str, Any]) -> Any:
    """A valid value of every key the schema defines (all optional keys included)."""
    if schema.get("x-kubernetes-int-or-string"):
        return 2
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return {"anything": {"goes": [1]}}
    if "enum" in schema:
        return schema["enum"][min(1, len(schema["enum"]) - 1)]
    kind = schema["type"]
    if kind == "object" and "properties" in schema:
        return {key: _example(sub) for key, sub in schema["properties"].items()}
    if kind == "object":
        return {"example": _example(schema["additionalProperties"])}
    if kind == "array":
        return [_example(schema["items"])]
    return {"boolean": True, "integer": 3, "string": "30s"}[kind]


def _consistent_dra(spec: dict[str, Any], policy: str) -> None:
    """Grouped CPU devices are topology-aware's, and name a cpuset; the other policies keep
    per-CPU mode, where the grouped keys are refused."""
    dra = spec["dra"]
    if policy == "topology-aware":
        dra["groupedCPUs"] = "8-15"
    else:
        dra["cpuDeviceMode"] = "individual"
        del dra["groupBy"], dra["groupedCPUs"]


def _consistent_balloons(spec: dict[str, Any]) -> None:
    """Make the generated balloons example meet the cross-field rules: expression keys name
    a label, a component is another balloon type, and the type that publishes DRA devices
    is not composite."""
    for exprs in (
        spec["balloonTypes"][0]["matchExpressions"],
        spec["preserve"]["matchExpressions"],
    ):
        exprs[0]["key"] = "pod/labels/30s"
    spec["balloonTypes"].append({"name": "part", "dra": spec["balloonTypes"][0].pop("dra")})
    spec["balloonTypes"][0]["components"][0]["balloonType"] = "part"


def _consistent_topology_aware(spec: dict[str, Any]) -> None:
    """A pod QoS scheduling class is keyed by a QoS class (the class names the generated
    example gives, ``30s``, are defined by it)."""
    spec["podQoSSchedulingClasses"] = {"Guaranteed": spec["schedulingClasses"][0]["name"]}


@pytest.mark.parametrize("policy", POLICIES)
def test_a_spec_using_every_schema_key_loads_and_round_trips(policy: str) -> None:
    spec = _example(_spec_schema(policy))
    if policy == "balloons":
        _consistent_balloons(spec)
    if policy == "topology-aware":
        _consistent_topology_aware(spec)
    _consistent_dra(spec, policy)
    assert validate(spec, _spec_schema(policy)) == []
    kind = SPEC_BY_POLICY[policy].kind
    model = structure_spec(spec, kind)
    assert structure_spec(unstructure_spec(model), kind) == model


def test_loader_output_validates_for_samples() -> None:
    for policy in POLICIES:
        document = load_sample(CONFIGS / f"{policy}.yaml")
        spec = unstructure_spec(structure_spec(document["spec"], document["kind"]))
        assert validate(spec, _spec_schema(policy)) == []
