"""Field helpers for configuration models: the Kubernetes key of each attribute.

Keys follow the Go nri-plugins CRDs, which are camelCase with upper-case acronyms
(``pinCPU``, ``minCPUs``, ``podResourceAPI``); a plain snake→camel rule gets those wrong,
so a field can name its key explicitly.
"""

from __future__ import annotations

from typing import Any

import attrs

KEY = "nri_resmgr.key"


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def key_of(attribute: attrs.Attribute[Any]) -> str:
    explicit = attribute.metadata.get(KEY)
    return str(explicit) if explicit else camel(attribute.name)


def field(*, key: str | None = None, **kwargs: Any) -> Any:
    """An attrs field whose config key is ``key`` (default: the camelCase attribute name)."""
    metadata = dict(kwargs.pop("metadata", {}))
    if key is not None:
        metadata[KEY] = key
    return attrs.field(metadata=metadata, **kwargs)
