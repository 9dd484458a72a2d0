"""Builds ``kubelet-dra-peer`` (``tests/dra/kubeletpeer/main.go``) from kubelet's own packages.

The same wrapper-module approach as ``tests/kube/gobuild.py`` uses for kube-apiserver, and
its Go caches, so the Kubernetes packages both need compile once: a throwaway main module
requires ``k8s.io/kubernetes`` at the same version and replaces every staging module by its
published twin. One binary per Kubernetes version (``bin/kubelet-dra-peer-<version>``),
rebuilt when ``main.go`` or the versions change (hash stamp).

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

SOURCE = Path(__file__).resolve().parent / "kubeletpeer" / "main.go"
NAME = "kubelet-dra-peer"

__all__ = ["BuildError", "ensure_peer", "peer_path"]


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
    digest = build_digest(SOURCE.read_bytes(), *requires(version))
    if is_current(out, digest):
        return out
    workdir = kube_module(NAME, version)
    shutil.copy(SOURCE, workdir / "main.go")
    _go(workdir, "get", *requires(version))
    _build(workdir, ".", out)
    stamp(out, digest)
    return out


if __name__ == "__main__":
    try:
        for wanted in sys.argv[1:] or [KUBERNETES_VERSION]:
            print(ensure_peer(wanted))
    except BuildError as exc:
        sys.exit(f"peer build failed: {exc}")
