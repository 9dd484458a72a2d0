"""API objects as the client hands them out: decoded JSON, and a list with its version."""

from __future__ import annotations

from typing import Any

import attrs

KubeObject = dict[str, Any]


@attrs.frozen
class ObjectList:
    """A full list and the resourceVersion to watch from to see every later change."""

    items: tuple[KubeObject, ...]
    resource_version: str


__all__ = ["KubeObject", "ObjectList"]
