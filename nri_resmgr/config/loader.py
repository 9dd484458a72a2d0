"""Reading and writing policy configuration: YAML documents ⇄ frozen models.

Structuring is strict on purpose: cattrs would otherwise turn ``"yes"`` into ``True`` and a
string into a tuple of characters. Every problem is reported as one line naming the
camelCase path of the key, as the user wrote it: ``spec.dra.enabled: expected a boolean,
got 'yes'``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import attrs
import cattrs
import yaml
from cattrs.errors import (
    AttributeValidationNote,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
    IterableValidationNote,
)
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from nri_resmgr.config.fields import key_of
from nri_resmgr.config.models import (
    GROUP_VERSION,
    SPEC_KINDS,
    Constraints,
    PolicyDocument,
    PolicySpec,
)
from nri_resmgr.config.validate import check_bounds, validate_spec
from nri_resmgr.errors import ConfigError
from nri_resmgr.shorten import short_repr, shorten


class ValueProblem(ValueError):
    """A leaf value of the wrong type or outside its allowed set."""


def _describe(value: Any) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return short_repr(value)


def _strict_bool(value: Any, _: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise ValueProblem(f"expected a boolean, got {_describe(value)}")


def _strict_int(value: Any, _: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueProblem(f"expected an integer, got {_describe(value)}")


def _strict_str(value: Any, _: Any) -> str:
    if isinstance(value, str):
        return value
    raise ValueProblem(f"expected a string, got {_describe(value)}")


def _quantity(value: Any) -> str | None:
    # Kubernetes quantities arrive as strings or, unquoted in YAML, as integers.
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise ValueProblem(f"expected a quantity or cpuset string, got {_describe(value)}")


def _is_literal(t: Any) -> bool:
    return get_origin(t) is Literal


def _literal_hook(t: Any) -> Any:
    allowed = get_args(t)

    def structure(value: Any, _: Any) -> Any:
        # Equal and of the same type: True == 1, but a boolean is not the choice 1.
        if any(value == a and type(value) is type(a) for a in allowed):
            return value
        choices = ", ".join(repr(a) for a in allowed)
        raise ValueProblem(f"expected one of {choices}, got {_describe(value)}")

    return structure


def _is_homogeneous_tuple(t: Any) -> bool:
    args = get_args(t)
    return get_origin(t) is tuple and len(args) == 2 and args[1] is Ellipsis


def _tuple_hook_factory(conv: cattrs.Converter) -> Any:
    def factory(t: Any) -> Any:
        element = get_args(t)[0]

        def structure(value: Any, _: Any) -> tuple[Any, ...]:
            if not isinstance(value, list | tuple):
                raise ValueProblem(f"expected a list, got {_describe(value)}")
            items, errors = [], []
            for index, item in enumerate(value):
                try:
                    items.append(conv.structure(item, element))
                except Exception as exc:
                    exc.add_note(IterableValidationNote(f"@ index {index}", index, element))
                    errors.append(exc)
            if errors:
                raise IterableValidationError("invalid list items", errors, t)
            return tuple(items)

        return structure

    return factory


def _mapping_guard(base: Any) -> Any:
    def structure(value: Any, t: Any) -> Any:
        if not isinstance(value, Mapping):
            raise ValueProblem(f"expected a mapping, got {_describe(value)}")
        return base(value, t)

    return structure


def _structure_constraints(value: Any, _: Any) -> Constraints:
    # By hand: both fields are quantities, which _quantity accepts as strings or integers.
    if not isinstance(value, Mapping):
        raise ValueProblem(f"expected a mapping, got {_describe(value)}")
    unknown = sorted(set(value) - {"cpu", "memory"})
    if unknown:
        raise ForbiddenExtraKeysError("", Constraints, set(unknown))
    errors = []
    parsed: dict[str, str | None] = {}
    for name in ("cpu", "memory"):
        try:
            parsed[name] = _quantity(value.get(name))
        except ValueProblem as exc:
            exc.add_note(AttributeValidationNote(f"@ {name}", name, str))
            errors.append(exc)
    if errors:
        raise ClassValidationError("invalid constraints", errors, Constraints)
    return Constraints(**parsed)


def _make_converter() -> cattrs.Converter:
    # Unknown keys are refused by the converter's setting, which the generated attrs hooks
    # below inherit; each plain hook's type is its return annotation. ``X | None`` needs no
    # hook: cattrs passes None through and structures anything else as X, with our hooks;
    # nor does writing tuples back: cattrs unstructures them as lists.
    conv = cattrs.Converter(forbid_extra_keys=True)
    for hook in (_strict_bool, _strict_int, _strict_str, _structure_constraints):
        conv.register_structure_hook(hook)
    conv.register_structure_hook_factory(_is_literal, _literal_hook)
    conv.register_structure_hook_factory(_is_homogeneous_tuple, _tuple_hook_factory(conv))

    def renames(cls: type) -> dict[str, Any]:
        return {a.name: override(rename=key_of(a)) for a in attrs.fields(cls)}

    def attrs_structure(cls: type) -> Any:
        return _mapping_guard(make_dict_structure_fn(cls, conv, **renames(cls)))

    def attrs_unstructure(cls: type) -> Any:
        return make_dict_unstructure_fn(cls, conv, _cattrs_omit_if_default=True, **renames(cls))

    conv.register_structure_hook_factory(attrs.has, attrs_structure)
    conv.register_unstructure_hook_factory(attrs.has, attrs_unstructure)
    return conv


@functools.cache
def converter() -> cattrs.Converter:
    """The strict converter, built once on first use rather than at import.

    Building it costs about 10 ms (cattrs generates a structuring function per model class on
    first use); a load afterwards costs well under 1 ms. Built lazily, its construction runs
    inside the tests that load a config, where a mutation tool's forked worker can observe it
    (``tests/mutation_plugin.py`` clears the cache per test under mutmut).
    """
    return _make_converter()


# -- error reporting ----------------------------------------------------------------------


def _note_path(exc: BaseException, cls: type | None) -> str:
    for note in getattr(exc, "__notes__", []):
        if isinstance(note, AttributeValidationNote):
            if cls is not None and attrs.has(cls):
                for a in attrs.fields(cls):
                    if a.name == note.name:
                        return "." + key_of(a)
            return "." + note.name
        if isinstance(note, IterableValidationNote):
            return f"[{note.index}]"
    return ""


def _problems(exc: BaseException, path: str) -> list[str]:
    if isinstance(exc, ForbiddenExtraKeysError):
        return [f"{path}.{shorten(str(k), 60)}: unknown key" for k in sorted(exc.extra_fields)]
    if isinstance(exc, ClassValidationError):
        out = []
        for sub in exc.exceptions:
            out.extend(_problems(sub, path + _note_path(sub, exc.cl)))
        return out
    if isinstance(exc, IterableValidationError):
        out = []
        for sub in exc.exceptions:
            out.extend(_problems(sub, path + _note_path(sub, None)))
        return out
    if isinstance(exc, KeyError):
        return [f"{path}: required key missing"]
    return [f"{path}: {shorten(str(exc), 300)}"]


# -- public API ---------------------------------------------------------------------------


def structure_spec(data: Any, kind: str, path: str = "spec") -> PolicySpec:
    """Turn the ``spec`` of a ``kind`` document into its model, or raise ConfigError."""
    try:
        cls = SPEC_KINDS[kind]
    except KeyError:
        raise ConfigError(_unknown_kind(kind)) from None
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: expected a mapping, got {_describe(data)}")
    if "reservedResources" not in data:
        raise ConfigError(f"{path}.reservedResources: required key missing")
    check_bounds(data, path)
    try:
        spec: PolicySpec = converter().structure(data, cls)
    except Exception as exc:
        raise ConfigError(_problems(exc, path)) from exc
    validate_spec(spec, path)
    return spec


def unstructure_spec(spec: PolicySpec) -> dict[str, Any]:
    result: dict[str, Any] = converter().unstructure(spec)
    return result


def _unknown_kind(kind: object) -> str:
    known = ", ".join(sorted(SPEC_KINDS))
    return f"kind: unknown policy kind {short_repr(kind)} (expected one of {known})"


def load_document(data: Any) -> PolicyDocument:
    """A parsed YAML/JSON policy CR → PolicyDocument, or ConfigError naming each problem."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"document: expected a mapping, got {_describe(data)}")
    api_version = data.get("apiVersion")
    if api_version != GROUP_VERSION:
        raise ConfigError(f"apiVersion: expected {GROUP_VERSION!r}, got {short_repr(api_version)}")
    kind = data.get("kind")
    if kind not in SPEC_KINDS:
        raise ConfigError(_unknown_kind(kind))
    unknown = sorted(set(data) - {"apiVersion", "kind", "metadata", "spec", "status"})
    if unknown:
        raise ConfigError([f"{shorten(str(k), 60)}: unknown key" for k in unknown])
    meta = data.get("metadata") or {}
    if not isinstance(meta, Mapping):
        raise ConfigError(f"metadata: expected a mapping, got {_describe(meta)}")
    if "spec" not in data:
        raise ConfigError("spec: required key missing")
    spec = structure_spec(data["spec"], str(kind))
    generation = meta.get("generation")
    return PolicyDocument(
        kind=str(kind),
        spec=spec,
        name=str(meta.get("name", "")),
        namespace=str(meta.get("namespace", "")),
        uid=str(meta.get("uid", "")),
        generation=generation if isinstance(generation, int) else 0,
        resource_version=str(meta.get("resourceVersion", "")),
    )


class _Yaml12Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans: only true/false, so ``yes`` stays a string.

    YAML 1.1 reads ``yes``/``no``/``on``/``off`` as booleans; a user who writes
    ``enabled: yes`` then silently gets True, which the strict checks exist to prevent.
    """


_Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool",
    re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    list("tTfF"),
)


def parse_yaml(text: str, source: str = "config") -> Any:
    try:
        return yaml.load(text, Loader=_Yaml12Loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{source}: invalid YAML{where}: {problem}") from exc


def load_file(path: str | Path) -> PolicyDocument:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read config file: {exc.strerror or exc}") from exc
    return load_document(parse_yaml(text, str(p)))


def dump_document(doc: PolicyDocument) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": doc.name} if doc.name else {}
    if doc.namespace:
        metadata["namespace"] = doc.namespace
    return {
        "apiVersion": GROUP_VERSION,
        "kind": doc.kind,
        "metadata": metadata,
        "spec": unstructure_spec(doc.spec),
    }
