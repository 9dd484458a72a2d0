"""Builds ``kubelet-dra-peer`` (``tests/dra/kubeletpeer/main.go``) from kubelet's own packages.

The same wrapper-module approach as ``tests/kube/gobuild.py`` uses for kube-apiserver, and
its Go caches, so the Kubernetes packages both need compile once: a throwaway main module
requires ``k8s.io/kubernetes`` at the same version and replaces every staging module by its
published twin. The binary is rebuilt when ``main.go`` or the versions change (hash stamp).

Run as ``python -m tests.dra.kubeletbuild`` or let the test fixture call ``ensure_peer()``.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

from tests.kube.gobuild import (
    KUBERNETES_VERSION,
    STAGING_VERSION,
    BuildError,
    _build,
    _go,
    bin_dir,
    kube_module,
)

SOURCE = Path(__file__).resolve().parent / "kubeletpeer" / "main.go"
NAME = "kubelet-dra-peer"
# The modules main.go imports directly; the staging ones resolve to STAGING_VERSION.
REQUIRES = (
    f"k8s.io/kubernetes@{KUBERNETES_VERSION}",
    f"k8s.io/api@{STAGING_VERSION}",
    f"k8s.io/apimachinery@{STAGING_VERSION}",
    f"k8s.io/client-go@{STAGING_VERSION}",
    f"k8s.io/kubelet@{STAGING_VERSION}",
    "k8s.io/klog/v2",
)

__all__ = ["BuildError", "ensure_peer", "peer_path"]


def peer_path() -> Path:
    return bin_dir() / NAME


def _digest() -> str:
    h = hashlib.sha256(SOURCE.read_bytes())
    h.update(" ".join(REQUIRES).encode())
    return h.hexdigest()


def ensure_peer() -> Path:
    """The peer binary, built when missing or stale; raises ``BuildError`` when impossible."""
    out = peer_path()
    stamp = out.with_name(out.name + ".sha256")
    digest = _digest()
    if out.exists() and stamp.exists() and stamp.read_text().strip() == digest:
        return out
    if shutil.which("go") is None:
        raise BuildError("the Go toolchain (go) is not on PATH")
    workdir = kube_module(NAME)
    shutil.copy(SOURCE, workdir / "main.go")
    _go(workdir, "get", *REQUIRES)
    _build(workdir, ".", out)
    stamp.write_text(digest + "\n")
    return out


if __name__ == "__main__":
    try:
        print(ensure_peer())
    except BuildError as exc:
        sys.exit(f"peer build failed: {exc}")
