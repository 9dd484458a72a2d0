"""cattrs' errors as lines, each naming the camelCase path of the key as the user wrote
it: ``spec.dra.enabled: expected a boolean, got 'yes'``."""

from __future__ import annotations

import attrs
from cattrs.errors import (
    AttributeValidationNote,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
    IterableValidationNote,
)

from nri_resmgr.config.fields import key_of
from nri_resmgr.shorten import shorten

__all__ = ["problems"]


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


def problems(exc: BaseException, path: str) -> list[str]:
    if isinstance(exc, ForbiddenExtraKeysError):
        return [f"{path}.{shorten(str(k), 60)}: unknown key" for k in sorted(exc.extra_fields)]
    if isinstance(exc, ClassValidationError):
        out = []
        for sub in exc.exceptions:
            out.extend(problems(sub, path + _note_path(sub, exc.cl)))
        return out
    if isinstance(exc, IterableValidationError):
        out = []
        for sub in exc.exceptions:
            out.extend(problems(sub, path + _note_path(sub, None)))
        return out
    if isinstance(exc, KeyError):
        return [f"{path}: required key missing"]
    return [f"{path}: {shorten(str(exc), 300)}"]
