"""Policy documents: a whole CR (or a local file of the same shape) <-> ``PolicyDocument``,
and YAML read with 1.2 booleans."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from nri_resmgr.config.converter import describe
from nri_resmgr.config.loader import structure_spec, unknown_kind, unstructure_spec
from nri_resmgr.config.models import GROUP_VERSION, SPEC_KINDS, PolicyDocument
from nri_resmgr.errors import ConfigError
from nri_resmgr.shorten import short_repr, shorten

__all__ = ["dump_document", "load_document", "load_file", "parse_yaml"]


def load_document(data: Any) -> PolicyDocument:
    """A parsed YAML/JSON policy CR → PolicyDocument, or ConfigError naming each problem."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"document: expected a mapping, got {describe(data)}")
    api_version = data.get("apiVersion")
    if api_version != GROUP_VERSION:
        raise ConfigError(f"apiVersion: expected {GROUP_VERSION!r}, got {short_repr(api_version)}")
    kind = data.get("kind")
    if kind not in SPEC_KINDS:
        raise ConfigError(unknown_kind(kind))
    unknown = sorted(set(data) - {"apiVersion", "kind", "metadata", "spec", "status"})
    if unknown:
        raise ConfigError([f"{shorten(str(k), 60)}: unknown key" for k in unknown])
    meta = data.get("metadata") or {}
    if not isinstance(meta, Mapping):
        raise ConfigError(f"metadata: expected a mapping, got {describe(meta)}")
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


MAX_YAML_DEPTH = 64
"""Collections nested in one YAML document, at most. PyYAML composes nodes recursively, so a
3,000-deep list ended in RecursionError (a traceback at start-up, a dead file watcher on a
reload); a spec is refused past ``validate.MAX_SPEC_DEPTH`` (24) levels anyway, and no
workload or configuration we read comes near 64."""


class _Yaml12Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans: only true/false, so ``yes`` stays a string; and
    documents nested at most ``MAX_YAML_DEPTH`` levels.

    YAML 1.1 reads ``yes``/``no``/``on``/``off`` as booleans; a user who writes
    ``enabled: yes`` then silently gets True, which the strict checks exist to prevent.
    """

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self._depth >= MAX_YAML_DEPTH:
            mark = parent.start_mark if parent is not None else None  # the deepest collection
            raise yaml.composer.ComposerError(
                None, None, f"nested deeper than {MAX_YAML_DEPTH} levels", mark
            )
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


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
