"""Reading and writing policy configuration: a ``spec`` mapping <-> its frozen model.

Every problem is reported as one line naming the camelCase path of the key, as the user
wrote it: ``spec.dra.enabled: expected a boolean, got 'yes'``. The pieces: ``converter``
(strict structuring), ``problems`` (cattrs' errors as those lines), ``validate`` (checks
across fields); ``documents`` reads whole CRs and YAML files.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nri_resmgr.config.converter import converter, describe
from nri_resmgr.config.models import SPEC_KINDS, PolicySpec
from nri_resmgr.config.problems import problems
from nri_resmgr.config.validate import check_bounds, validate_spec
from nri_resmgr.errors import ConfigError
from nri_resmgr.shorten import short_repr

__all__ = ["structure_spec", "unknown_kind", "unstructure_spec"]


def structure_spec(data: Any, kind: str, path: str = "spec") -> PolicySpec:
    """Turn the ``spec`` of a ``kind`` document into its model, or raise ConfigError."""
    try:
        cls = SPEC_KINDS[kind]
    except KeyError:
        raise ConfigError(unknown_kind(kind)) from None
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: expected a mapping, got {describe(data)}")
    if "reservedResources" not in data:
        raise ConfigError(f"{path}.reservedResources: required key missing")
    check_bounds(data, path)
    try:
        spec: PolicySpec = converter().structure(data, cls)
    except Exception as exc:
        raise ConfigError(problems(exc, path)) from exc
    validate_spec(spec, path)
    return spec


def unstructure_spec(spec: PolicySpec) -> dict[str, Any]:
    result: dict[str, Any] = converter().unstructure(spec)
    return result


def unknown_kind(kind: object) -> str:
    known = ", ".join(sorted(SPEC_KINDS))
    return f"kind: unknown policy kind {short_repr(kind)} (expected one of {known})"
