"""Framing checks for the messages decoded by betterproto (Configure, UpdateContainer, replies).

betterproto slices a length-delimited field without checking that the bytes are there, so a
truncated message parses silently into shortened strings and missing fields. The hand-written
codec (``wire.fields``) refuses those; ``check`` runs it over a payload, and into every
sub-message field the generated class declares, before betterproto sees the payload.
"""

from __future__ import annotations

import functools
from typing import Any

import betterproto

from nri_resmgr.nri import wire

# Deeper than any NRI message; protobuf's own decoders stop at 100.
MAX_DEPTH = 64
_FIELD_TABLE = "_betterproto"


def check(payload: bytes, message_type: type[betterproto.Message]) -> None:
    """Raises ``wire.WireError`` if ``payload`` is not well framed as ``message_type``."""
    stack: list[tuple[bytes, type[betterproto.Message], int]] = [(payload, message_type, 0)]
    while stack:
        data, cls, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise wire.WireError(f"{cls.__name__}: nested deeper than {MAX_DEPTH} messages")
        nested = _nested_fields(cls)
        for number, value in wire.fields(data):
            sub = nested.get(number)
            if sub is not None and isinstance(value, bytes):
                stack.append((value, sub, depth + 1))


@functools.cache
def _nested_fields(cls: type[betterproto.Message]) -> dict[int, type[betterproto.Message]]:
    """Field number → message class, for the fields of ``cls`` that hold a message (or map)."""
    # betterproto's per-class field table (typed too narrowly in its stubs to reach directly).
    meta: Any = getattr(cls, _FIELD_TABLE)
    out: dict[int, type[betterproto.Message]] = {}
    for name, field in meta.meta_by_field_name.items():
        if field.proto_type not in (betterproto.TYPE_MESSAGE, betterproto.TYPE_MAP):
            continue
        sub = meta.cls_by_field.get(name)
        if isinstance(sub, type) and issubclass(sub, betterproto.Message):
            out[field.number] = sub
    return out
