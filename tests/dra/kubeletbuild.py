"""Builds ``kubelet-dra-peer`` (``tests/dra/kubeletpeer/main.go``) from kubelet's own packages.

The same wrapper-module approach as ``tests/kube/gobuild.py`` uses for kube-apiserver, and
its Go caches, so the Kubernetes packages both need compile once: a throwaway main module
requires ``k8s.io/kubernetes`` at the same version and replaces every staging module by its
published twin. One binary per Kubernetes version (``bin/kubelet-dra-peer-<version>``),
rebuilt when a source file, the build tags or the versions change (hash stamp).

Where kubelet's API changed between the versions the suite runs, the peer has one small Go
file per variant behind a build tag, and ``build_tags()`` picks the tags for a version: 1.35's
``GetNodeFunc`` takes no context (``getnode_noctx``), 1.36's and later ones take one.

Run as ``python -m tests.dra.kubeletbuild [VERSION ...]`` or let the test fixture call
``ensure_peer()``.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from tests.kube.gobuild import (
    KUBERNETES_VERSION,
    BuildError,
    _build,
    _go,
    build_digest,
    is_current,
    kube_module,
    staging_version,
    stamp,
    versioned_path,
)
from tests.kube.versions import minor

SOURCE_DIR = Path(__file__).resolve().parent / "kubeletpeer"
NAME = "kubelet-dra-peer"
GETNODE_CONTEXT_FROM = (1, 36)
"""The first Kubernetes minor whose kubelet ``dra.GetNodeFunc`` takes a context."""

__all__ = ["BuildError", "build_tags", "ensure_peer", "peer_path"]


def sources() -> list[Path]:
    """Every Go file of the peer; build tags choose among the per-version ones."""
    return sorted(SOURCE_DIR.glob("*.go"))


def build_tags(version: str) -> tuple[str, ...]:
    """``go build`` flags selecting the peer's files for kubelet ``version``'s API."""
    if minor(version) < GETNODE_CONTEXT_FROM:
        return ("-tags", "getnode_noctx")
    return ()


def requires(version: str) -> tuple[str, ...]:
    """The modules main.go imports directly; the staging ones at their published twin."""
    staging = staging_version(version)
    return (
        f"k8s.io/kubernetes@{version}",
        f"k8s.io/api@{staging}",
        f"k8s.io/apimachinery@{staging}",
        f"k8s.io/client-go@{staging}",
        f"k8s.io/kubelet@{staging}",
        "k8s.io/klog/v2",
    )


def peer_path(version: str = KUBERNETES_VERSION) -> Path:
    return versioned_path(NAME, version)


def ensure_peer(version: str = KUBERNETES_VERSION) -> Path:
    """The peer binary, built when missing or stale; raises ``BuildError`` when impossible."""
    out = peer_path(version)
    files = sources()
    tags = build_tags(version)
    digest = build_digest(*(f.name.encode() + f.read_bytes() for f in files), *tags,
                          *requires(version))  # fmt: skip
    if is_current(out, digest):
        return out
    workdir = kube_module(NAME, version)
    for file in files:
        shutil.copy(file, workdir / file.name)
    _go(workdir, "get", *requires(version))
    _build(workdir, ".", out, *tags)
    stamp(out, digest)
    return out


if __name__ == "__main__":
    try:
        for wanted in sys.argv[1:] or [KUBERNETES_VERSION]:
            print(ensure_peer(wanted))
    except BuildError as exc:
        sys.exit(f"peer build failed: {exc}")
