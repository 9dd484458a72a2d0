"""Builds ``dra-metadata-reader`` (``tests/dra/metadatareader/main.go``): the consumer side of
device metadata (KEP-5304), k8s.io/dynamic-resource-allocation's ``devicemetadata`` package at
the published ``READER_VERSION``, as a static binary a container runs.

A throwaway main module in the cache requires that module; the binary lands in
``bin/dra-metadata-reader-<version>``, rebuilt when ``main.go`` or the version changes (hash
stamp). ``CGO_ENABLED=0``: the container (busybox) has no C library to link against. Run as
``python -m tests.dra.metadatabuild`` or let the test fixture call ``ensure_reader()``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.kube.gobuild import (
    BuildError,
    _fresh_module,
    _go,
    bin_dir,
    build_digest,
    is_current,
    stamp,
)

SOURCE = Path(__file__).resolve().parent / "metadatareader" / "main.go"
NAME = "dra-metadata-reader"
READER_VERSION = "v0.37.2"
"""The k8s.io/dynamic-resource-allocation release whose kubeletplugin metadata code we match."""
MODULE = "k8s.io/dynamic-resource-allocation"

__all__ = ["BuildError", "ensure_reader"]


def reader_path(version: str = READER_VERSION) -> Path:
    return bin_dir() / f"{NAME}-{version}"


def ensure_reader(version: str = READER_VERSION) -> Path:
    """The reader binary, built when missing or stale; raises ``BuildError`` when impossible."""
    out = reader_path(version)
    digest = build_digest(SOURCE.read_bytes(), f"{MODULE}@{version}", "static")
    if is_current(out, digest):
        return out
    workdir = _fresh_module(f"{NAME}-{version}")
    (workdir / "main.go").write_bytes(SOURCE.read_bytes())
    _go(workdir, "get", f"{MODULE}@{version}")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    static = {"CGO_ENABLED": "0"}
    _go(workdir, "build", "-trimpath", "-ldflags=-s -w", "-o", str(tmp), ".", nice=True, env=static)
    tmp.replace(out)  # atomic: a half-written binary never looks cached
    stamp(out, digest)
    return out


if __name__ == "__main__":
    try:
        print(ensure_reader(*sys.argv[1:2]))
    except BuildError as exc:
        sys.exit(f"reader build failed: {exc}")
