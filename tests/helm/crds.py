"""Test helpers: the committed CRDs, admission of a CR document against them, YAML streams."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml

from nri_resmgr.config.documents import parse_yaml
from tests.helm.structural import validate

ROOT = Path(__file__).resolve().parents[2]
HELM = ROOT / "helm"
CONFIGS = ROOT / "tests" / "foundation" / "configs"
POLICIES = ("topology-aware", "balloons", "template")


def chart(policy: str) -> Path:
    return HELM / f"nri-resmgr-{policy}"


@cache
def committed_crd(policy: str) -> dict[str, Any]:
    (path,) = sorted((chart(policy) / "crds").glob("*.yaml"))
    document: dict[str, Any] = yaml.safe_load(path.read_text())
    return document


def crd_by_kind() -> dict[tuple[str, str], dict[str, Any]]:
    """(group, kind) → the committed CRD of the chart that ships it."""
    out = {}
    for policy in POLICIES:
        crd = committed_crd(policy)
        out[(crd["spec"]["group"], crd["spec"]["names"]["kind"])] = crd
    return out


def openapi(crd: dict[str, Any]) -> dict[str, Any]:
    (version,) = crd["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def admit(document: Any) -> list[str]:
    """What the API server would say to creating ``document``: [] if it is accepted."""
    if not isinstance(document, dict):
        return ["document is not an object"]
    group, _, version = str(document.get("apiVersion", "")).partition("/")
    crd = crd_by_kind().get((group, str(document.get("kind"))))
    if crd is None:
        return [f"no CRD serves kind {document.get('kind')!r} in group {group!r}"]
    served = [v["name"] for v in crd["spec"]["versions"] if v["served"]]
    if version not in served:
        return [f"version {version!r} is not served (served: {served})"]
    return validate(document, openapi(crd))


def documents(text: str) -> list[dict[str, Any]]:
    """The objects of a multi-document YAML stream such as ``helm template`` prints."""
    return [d for d in yaml.safe_load_all(text) if d is not None]


def load_sample(path: Path) -> Any:
    """A sample as the daemon reads it (YAML 1.2 booleans: ``yes`` is a string)."""
    return parse_yaml(path.read_text(), str(path))
