"""OpenAPI v3 schemas and CustomResourceDefinitions generated from the config models.

The attrs models are the one source of truth: every key, type, enum and default in the CRDs
comes from them, so the daemon and the API server can't disagree about what a CR may hold.
The output follows the Kubernetes *structural schema* rules: every node has a ``type``
(except int-or-string and free-form nodes), ``additionalProperties`` never stands beside
``properties``, and unknown keys are left to the API server's pruning (or rejected by its
strict field validation, which kubectl uses by default).

A few facts are not in the types: the quantity and CPU list patterns (from the grammars the
loader parses with: ``quantity.PATTERN``, ``cpuset.LIST_BODY``), and, mirroring
``validate.py``, the required ``reservedResources.cpu`` and unique, non-empty balloon type
names.
"""

from __future__ import annotations

import typing
from types import NoneType, UnionType
from typing import Any, Literal, get_args, get_origin, get_type_hints

import attrs

from nri_resmgr.agent.status import FAILURE_ROOM, SUCCESS_ROOM
from nri_resmgr.config.fields import key_of
from nri_resmgr.config.models import (
    API_GROUP,
    API_VERSION,
    SPEC_KINDS,
    BalloonType,
    Constraints,
    PolicySpec,
)
from nri_resmgr.config.values import MAX_CPU_VALUE
from nri_resmgr.cpuset import LIST_BODY
from nri_resmgr.quantity import BODY as QUANTITY_BODY
from nri_resmgr.quantity import PATTERN as QUANTITY_PATTERN

Schema = dict[str, Any]

# The syntax the loader parses (config/values.py); RE2 reads it as Python does (the API server
# compiles patterns with Go).
CPU_PATTERN = rf"^(?:{QUANTITY_BODY}|(?:exclude-)?cpuset:{LIST_BODY})$"

# Entries of one free-form map (control.rdt.options, .partitions, .classes, blockio...).
FREE_FORM_MAX_PROPERTIES = 256

# Balloon types are identified by name: a list-map makes the API server reject duplicates.
LIST_MAP_KEYS: dict[type, list[str]] = {BalloonType: ["name"]}
MIN_LENGTH: dict[tuple[type, str], int] = {(BalloonType, "name"): 1}


class SchemaError(TypeError):
    """A model field has a type the schema generator does not know how to express."""


def _is_optional(t: Any) -> bool:
    return get_origin(t) in (typing.Union, UnionType) and NoneType in get_args(t)


def _literal_schema(t: Any) -> Schema:
    values = list(get_args(t))
    kinds = {type(v) for v in values}
    if kinds != {str}:
        raise SchemaError(f"only string Literals are supported, got {t!r}")
    return {"type": "string", "enum": values}


def _constraints_schema() -> Schema:
    def int_or_string(pattern: str, what: str) -> Schema:
        return {
            "description": what,
            "x-kubernetes-int-or-string": True,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": pattern,
            "maxLength": MAX_CPU_VALUE,
        }

    return {
        "type": "object",
        "properties": {
            "cpu": int_or_string(
                CPU_PATTERN, "a CPU quantity (750m, 2), cpuset:<list> or exclude-cpuset:<list>"
            ),
            "memory": int_or_string(QUANTITY_PATTERN, "a memory quantity (512Mi)"),
        },
    }


def type_schema(t: Any) -> Schema:
    """The schema of one annotated type (without the field's default)."""
    if _is_optional(t):
        (inner,) = [a for a in get_args(t) if a is not NoneType]
        return {**type_schema(inner), "nullable": True}
    origin, args = get_origin(t), get_args(t)
    if t is bool:
        return {"type": "boolean"}
    if t is int:
        return {"type": "integer"}
    if t is str:
        return {"type": "string"}
    if origin is Literal:
        return _literal_schema(t)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return {"type": "array", "items": type_schema(args[0])}
    if origin is dict and args[0] is str:
        if args[1] is Any:
            # Free-form (kept, not applied): breadth and text length are bounded here; depth
            # cannot be in a structural schema, so the loader refuses anything deeper than
            # validate.MAX_SPEC_DEPTH levels.
            return {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                    "maxProperties": FREE_FORM_MAX_PROPERTIES}  # fmt: skip
        return {"type": "object", "additionalProperties": type_schema(args[1])}
    if t is Constraints:
        return _constraints_schema()
    if isinstance(t, type) and attrs.has(t):
        return model_schema(t)
    raise SchemaError(f"no schema for type {t!r}")


def _default_of(attribute: attrs.Attribute[Any]) -> Any:
    """A JSON default for scalar and list fields; None when the schema should carry none.

    Object-valued fields get no default: the model fills them in, and an API-server default
    on them would materialize every nested default into stored objects.
    """
    default = attribute.default
    if default is attrs.NOTHING or default is None:
        return None
    if isinstance(default, bool | int | str):
        return default
    if isinstance(default, tuple) and all(isinstance(v, str) for v in default):
        return list(default)
    return None


def field_schema(cls: type, attribute: attrs.Attribute[Any], hint: Any) -> Schema:
    schema = type_schema(hint)
    default = _default_of(attribute)
    if default is not None:
        schema["default"] = default
    if (cls, attribute.name) in MIN_LENGTH:
        schema["minLength"] = MIN_LENGTH[(cls, attribute.name)]
    item_model = get_args(hint)[0] if get_origin(hint) is tuple else None
    if item_model in LIST_MAP_KEYS:
        schema["x-kubernetes-list-type"] = "map"
        schema["x-kubernetes-list-map-keys"] = LIST_MAP_KEYS[item_model]
    return schema


def model_schema(cls: type) -> Schema:
    """``type: object`` with one property per attrs field, keyed as the config spells it."""
    hints = get_type_hints(cls)
    properties: Schema = {}
    required: list[str] = []
    for attribute in attrs.fields(cls):
        key = key_of(attribute)
        properties[key] = field_schema(cls, attribute, hints[attribute.name])
        if attribute.default is attrs.NOTHING:
            required.append(key)
    schema: Schema = {"type": "object", "properties": dict(sorted(properties.items()))}
    if required:
        schema["required"] = required
    return schema


def spec_schema(spec_cls: type[PolicySpec]) -> Schema:
    schema = model_schema(spec_cls)
    # nri-plugins requires reservedResources, and validate.py requires its cpu.
    schema["required"] = ["reservedResources"]
    reserved = schema["properties"]["reservedResources"]
    schema["properties"]["reservedResources"] = {**reserved, "required": ["cpu"]}
    return schema


def status_schema() -> Schema:
    node_status = {
        "type": "object",
        "properties": {
            "status": {"type": "string", "enum": ["Success", "Failure"]},
            "generation": {"type": "integer", "format": "int64"},
            "errors": {"type": "string", "nullable": True},
            "timestamp": {"type": "string", "format": "date-time"},
        },
    }
    return {
        "type": "object",
        "properties": {
            "nodes": {
                "description": (
                    "per-node result of applying this configuration: every node of a group "
                    f"of up to {SUCCESS_ROOM}; in a larger group {SUCCESS_ROOM} nodes' "
                    f"successes and failures up to {FAILURE_ROOM} entries. Every node also "
                    "reports in its own NodeResourceTopology (attributes nri-resmgr.io/"
                    "config*), or without one as an Event on this object"
                ),
                "type": "object",
                "maxProperties": FAILURE_ROOM,
                "additionalProperties": node_status,
                "x-kubernetes-validations": [
                    {
                        "rule": "self.filter(k, has(self[k].status) && "
                        f"self[k].status == 'Success').size() <= {SUCCESS_ROOM}",
                        "message": f"at most {SUCCESS_ROOM} successes (the others report in "
                        "their NodeResourceTopology or as Events)",
                    }
                ],
            }
        },
    }


def resource_schema(spec_cls: type[PolicySpec]) -> Schema:
    return {
        "type": "object",
        "description": f"{spec_cls.kind} configures the nri-resmgr {spec_cls.policy_name} policy.",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema(spec_cls),
            "status": status_schema(),
        },
        "required": ["spec"],
    }


def plural_of(kind: str) -> str:
    lower = kind.lower()
    return lower[:-1] + "ies" if lower.endswith("y") else lower + "s"


def crd(kind: str) -> Schema:
    """The whole CustomResourceDefinition of one policy kind."""
    spec_cls = SPEC_KINDS[kind]
    plural = plural_of(kind)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{API_GROUP}"},
        "spec": {
            "group": API_GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": API_VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": resource_schema(spec_cls)},
                }
            ],
        },
    }


def crd_for_policy(policy_name: str) -> Schema:
    (kind,) = [k for k, cls in SPEC_KINDS.items() if cls.policy_name == policy_name]
    return crd(kind)


def strict_json_schema(schema: Schema) -> Schema:
    """A structural schema as plain JSON Schema that rejects unknown keys.

    Helm checks values against ``values.schema.json`` before rendering; there a typo such as
    ``dra: {enabeld: true}`` should fail loudly instead of being pruned later by the API
    server. So every object with ``properties`` gets ``additionalProperties: false`` (legal in
    JSON Schema, unlike in a CRD), ``nullable`` becomes a ``null`` type, int-or-string becomes
    a two-type union, and the Kubernetes extensions are dropped.
    """
    out: Schema = {}
    for key, value in schema.items():
        if key.startswith("x-kubernetes-") or key in ("nullable", "default", "anyOf"):
            continue
        if key == "properties":
            out[key] = {name: strict_json_schema(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = strict_json_schema(value)
        else:
            out[key] = value
    if schema.get("x-kubernetes-int-or-string"):
        out["type"] = ["integer", "string"]
    if schema.get("nullable"):
        out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    if "properties" in out and not schema.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out
