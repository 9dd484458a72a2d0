"""The strict cattrs converter: YAML values -> the frozen config models, and back.

Structuring is strict on purpose: cattrs would otherwise turn ``"yes"`` into ``True`` and a
string into a tuple of characters. A leaf of the wrong type raises ``ValueProblem``; cattrs
gathers them with the path of each (``problems`` turns that into lines).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, Literal, get_args, get_origin

import attrs
import cattrs
from cattrs.errors import (
    AttributeValidationNote,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
    IterableValidationNote,
)
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from nri_resmgr.config.fields import key_of
from nri_resmgr.config.models import Constraints
from nri_resmgr.config.values import parse_cpu, parse_memory
from nri_resmgr.errors import InvalidValue
from nri_resmgr.shorten import short_repr

__all__ = ["ValueProblem", "converter", "describe"]


class ValueProblem(InvalidValue):
    """A leaf value of the wrong type or outside its allowed set."""


def describe(value: Any) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return short_repr(value)


def _strict_bool(value: Any, _: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise ValueProblem(f"expected a boolean, got {describe(value)}")


def _strict_int(value: Any, _: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueProblem(f"expected an integer, got {describe(value)}")


def _strict_str(value: Any, _: Any) -> str:
    if isinstance(value, str):
        return value
    raise ValueProblem(f"expected a string, got {describe(value)}")


def _constraint_text(value: Any) -> str:
    # Kubernetes quantities arrive as strings or, unquoted in YAML, as integers.
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise ValueProblem(f"expected a quantity or cpuset string, got {describe(value)}")


def _is_literal(t: Any) -> bool:
    return get_origin(t) is Literal


def _literal_hook(t: Any) -> Any:
    allowed = get_args(t)

    def structure(value: Any, _: Any) -> Any:
        # Equal and of the same type: True == 1, but a boolean is not the choice 1.
        if any(value == a and type(value) is type(a) for a in allowed):
            return value
        choices = ", ".join(repr(a) for a in allowed)
        raise ValueProblem(f"expected one of {choices}, got {describe(value)}")

    return structure


def _is_homogeneous_tuple(t: Any) -> bool:
    args = get_args(t)
    return get_origin(t) is tuple and len(args) == 2 and args[1] is Ellipsis


def _tuple_hook_factory(conv: cattrs.Converter) -> Any:
    def factory(t: Any) -> Any:
        element = get_args(t)[0]

        def structure(value: Any, _: Any) -> tuple[Any, ...]:
            if not isinstance(value, list | tuple):
                raise ValueProblem(f"expected a list, got {describe(value)}")
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
            raise ValueProblem(f"expected a mapping, got {describe(value)}")
        return base(value, t)

    return structure


_CONSTRAINT_PARSERS: dict[str, Callable[[str], Any]] = {"cpu": parse_cpu, "memory": parse_memory}


def _structure_constraints(value: Any, _: Any) -> Constraints:
    # By hand: each field is text (or an integer) parsed into its typed value, once, here.
    if not isinstance(value, Mapping):
        raise ValueProblem(f"expected a mapping, got {describe(value)}")
    unknown = sorted(set(value) - set(_CONSTRAINT_PARSERS))
    if unknown:
        raise ForbiddenExtraKeysError("", Constraints, set(unknown))
    errors = []
    parsed: dict[str, Any] = {}
    for name, parse in _CONSTRAINT_PARSERS.items():
        raw = value.get(name)
        try:
            parsed[name] = None if raw is None else parse(_constraint_text(raw))
        except InvalidValue as exc:
            exc.add_note(AttributeValidationNote(f"@ {name}", name, str))
            errors.append(exc)
    if errors:
        raise ClassValidationError("invalid constraints", errors, Constraints)
    return Constraints(**parsed)


def _unstructure_constraints(c: Constraints) -> dict[str, str]:
    return {name: v.text for name, v in (("cpu", c.cpu), ("memory", c.memory)) if v is not None}


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
    conv.register_unstructure_hook(Constraints, _unstructure_constraints)

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
