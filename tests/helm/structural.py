"""A small validator for Kubernetes structural OpenAPI v3 schemas, for tests.

It checks what the API server checks for the schemas we generate: the structural rules a
CRD must follow (``structural_problems``), and whether an object is valid (``validate``):
types, nullable, int-or-string, enums, patterns, min/maxLength, maxProperties, required
keys, list-map key uniqueness and unknown fields. Unknown fields are reported as errors, as
the API server does under strict field validation (kubectl's default); without it it would
prune them silently.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

Schema = Mapping[str, Any]

_PY_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def _type_ok(value: Any, type_name: str) -> bool:
    if isinstance(value, bool) and type_name in ("integer", "number"):
        return False
    return isinstance(value, _PY_TYPES[type_name])


def validate(value: Any, schema: Schema, path: str = "") -> list[str]:
    """Every problem of ``value`` against ``schema``, one line each, naming the path."""
    if value is None:
        return [] if schema.get("nullable") else [f"{path}: must not be null"]
    if schema.get("x-kubernetes-int-or-string"):
        if not _type_ok(value, "integer") and not _type_ok(value, "string"):
            return [f"{path}: expected an integer or a string, got {value!r}"]
    elif "type" in schema and not _type_ok(value, schema["type"]):
        return [f"{path}: expected {schema['type']}, got {type(value).__name__} {value!r}"]
    problems = _check_value(value, schema, path)
    if isinstance(value, dict):
        problems += _check_object(value, schema, path)
    if isinstance(value, list):
        problems += _check_array(value, schema, path)
    return problems


def _check_value(value: Any, schema: Schema, path: str) -> list[str]:
    problems = []
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{path}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, str):
        if "pattern" in schema and not re.search(schema["pattern"], value):
            problems.append(f"{path}: {value!r} does not match {schema['pattern']}")
        if len(value) > schema.get("maxLength", len(value)):
            problems.append(f"{path}: longer than {schema['maxLength']}")
        if len(value) < schema.get("minLength", 0):
            problems.append(f"{path}: shorter than {schema['minLength']}")
    return problems


def _check_object(value: dict[str, Any], schema: Schema, path: str) -> list[str]:
    problems = [f"{path}.{key}: required" for key in schema.get("required", ()) if key not in value]
    if len(value) > schema.get("maxProperties", len(value)):
        problems.append(f"{path}: more than {schema['maxProperties']} properties")
    properties = schema.get("properties")
    extra = schema.get("additionalProperties")
    for key, item in value.items():
        if properties is not None and key in properties:
            problems += validate(item, properties[key], f"{path}.{key}")
        elif isinstance(extra, Mapping):
            problems += validate(item, extra, f"{path}.{key}")
        elif not schema.get("x-kubernetes-preserve-unknown-fields") and properties is not None:
            problems.append(f"{path}.{key}: unknown field")
    return problems


def _check_array(value: list[Any], schema: Schema, path: str) -> list[str]:
    problems = []
    items = schema.get("items")
    if items is not None:
        for index, item in enumerate(value):
            problems += validate(item, items, f"{path}[{index}]")
    if schema.get("x-kubernetes-list-type") == "map":
        keys = schema["x-kubernetes-list-map-keys"]
        seen: set[tuple[Any, ...]] = set()
        for index, item in enumerate(value):
            key = tuple(item.get(k) for k in keys) if isinstance(item, dict) else (item,)
            if key in seen:
                problems.append(f"{path}[{index}]: duplicate entry for key {keys}={key}")
            seen.add(key)
    return problems


def structural_problems(schema: Schema, path: str = "") -> list[str]:
    """Where ``schema`` breaks the structural-schema rules of apiextensions.k8s.io/v1."""
    problems = []
    free_form = schema.get("x-kubernetes-preserve-unknown-fields") or schema.get(
        "x-kubernetes-int-or-string"
    )
    if "type" not in schema and not free_form:
        problems.append(f"{path}: no type")
    if "properties" in schema and "additionalProperties" in schema:
        problems.append(f"{path}: properties and additionalProperties together")
    if "anyOf" in schema:
        int_or_string = [{"type": "integer"}, {"type": "string"}]
        if not (schema.get("x-kubernetes-int-or-string") and schema["anyOf"] == int_or_string):
            problems.append(f"{path}: anyOf other than the int-or-string form")
    if schema.get("x-kubernetes-list-type") == "map":
        items = schema.get("items", {})
        for key in schema.get("x-kubernetes-list-map-keys", ()):
            if key not in items.get("required", ()) and "default" not in items.get(
                "properties", {}
            ).get(key, {}):
                problems.append(f"{path}: list-map key {key} is neither required nor defaulted")
    if "default" in schema:
        problems += [f"{path}: default invalid: {p}" for p in validate(schema["default"], schema)]
    for key, sub in schema.get("properties", {}).items():
        problems += structural_problems(sub, f"{path}.{key}")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), Mapping):
            problems += structural_problems(schema[key], f"{path}.{key}")
    return problems
