"""Bounded text for messages: a bad value is quoted, never repeated whole.

One shared policy CR reaches every node, and its status gets one entry per node; a 600 KB
value quoted back into each error would fill logs and make the status too large to write.
"""

from __future__ import annotations

# Enough to recognise a value, short enough that many of them fit one status entry.
VALUE_LIMIT = 120


def shorten(text: str, limit: int = VALUE_LIMIT) -> str:
    """``text`` when it fits ``limit`` characters, else its start and how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text)} characters)"


def short_repr(value: object, limit: int = VALUE_LIMIT) -> str:
    """``repr(value)`` bounded by ``limit``; a long string is cut before ``repr`` sees it."""
    if isinstance(value, str | bytes) and len(value) > limit:
        return f"{value[:limit]!r}… ({len(value)} characters)"
    return shorten(repr(value), limit)
