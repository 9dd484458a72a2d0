"""Loading is strict everywhere: unknown keys in the resource sections and at the top level
of the document are refused with the key's path, for every policy kind."""

from __future__ import annotations

from typing import Any

import pytest

from nri_resmgr.config.documents import load_document
from nri_resmgr.config.models import SPEC_KINDS
from nri_resmgr.errors import ConfigError


def document(kind: str, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"reservedResources": {"cpu": "750m"}}
    spec.update(extra.pop("spec", {}))
    return {
        "apiVersion": "config.nri/v1alpha1",
        "kind": kind,
        "metadata": {"name": "default"},
        "spec": spec,
        **extra,
    }


CASES = {
    "reserved": (
        {"spec": {"reservedResources": {"cpu": "750m", "gpu": "1"}}},
        ["spec.reservedResources.gpu: unknown key"],
    ),
    "reserved-typo": (
        {"spec": {"reservedResources": {"cpus": "750m", "cpu": "1"}}},
        ["spec.reservedResources.cpus: unknown key"],
    ),
    "available": (
        {"spec": {"availableResources": {"cpu": "cpuset:0-1", "hugepages": "2"}}},
        ["spec.availableResources.hugepages: unknown key"],
    ),
    "top-level": ({"specs": {}}, ["specs: unknown key"]),
    "top-level-two": ({"extra": 1, "data": {}}, ["data: unknown key", "extra: unknown key"]),
}


@pytest.mark.parametrize("kind", sorted(SPEC_KINDS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_an_unknown_key_is_refused_with_its_path(kind: str, case: str) -> None:
    extra, problems = CASES[case]
    with pytest.raises(ConfigError) as info:
        load_document(document(kind, **extra))
    assert sorted(info.value.errors) == problems


@pytest.mark.parametrize("kind", sorted(SPEC_KINDS))
def test_known_keys_in_the_same_places_load(kind: str) -> None:
    # The control: the documents above differ from this one only by the unknown key.
    doc = load_document(
        document(kind, status={}, spec={"availableResources": {"cpu": "cpuset:0-1"}})
    )
    assert doc.spec.reserved_resources.cpu.text == "750m"
    assert doc.spec.available_resources.cpu.text == "cpuset:0-1"
