"""Reading a device metadata file (KEP-5304) as its format says: a JSON stream of
``DeviceMetadata`` objects, one per API version, newest first."""

from __future__ import annotations

import json
from typing import Any

VERSIONS = ("metadata.resource.k8s.io/v1beta1", "metadata.resource.k8s.io/v1alpha1")


def objects(text: str) -> list[dict[str, Any]]:
    """Every object of the stream, in order; raises ``ValueError`` on anything else."""
    decoder = json.JSONDecoder()
    out: list[dict[str, Any]] = []
    at = 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at == len(text):
            return out
        obj, at = decoder.raw_decode(text, at)
        if not isinstance(obj, dict):
            raise ValueError(f"stream object {len(out)} is a {type(obj).__name__}")
        out.append(obj)


def newest(text: str) -> dict[str, Any]:
    """The stream's objects checked to be one ``DeviceMetadata`` in each version we write, the
    same but for ``apiVersion``; returns the first."""
    found = objects(text)
    assert [o.get("apiVersion") for o in found] == list(VERSIONS), found
    assert all(o["kind"] == "DeviceMetadata" for o in found)
    bodies = [{k: v for k, v in o.items() if k != "apiVersion"} for o in found]
    assert all(b == bodies[0] for b in bodies)
    return found[0]


def attributes(device: dict[str, Any]) -> dict[str, Any]:
    """A metadata device's attributes as plain values (``{"int": 3}`` -> 3)."""
    out: dict[str, Any] = {}
    for name, value in (device.get("attributes") or {}).items():
        [(kind, plain)] = value.items()
        assert kind in ("int", "bool", "string", "version", "ints"), (name, value)
        out[name] = plain
    return out
