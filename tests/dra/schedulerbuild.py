"""Builds kube-scheduler (``k8s.io/kubernetes/cmd/kube-scheduler``) into the peer cache.

The wrapper-module approach of ``tests/kube/gobuild.py`` (kube-apiserver) and
``tests/dra/kubeletbuild.py`` (the kubelet DRA peer), with their Go caches, so the Kubernetes
packages the three share compile once. The version is stamped with the ldflags kube's own
build uses (without them ``--version`` says v0.0.0-master). The binary is rebuilt when the
version or the flags change (hash stamp).

No feature gates are needed at 1.35: DynamicResourceAllocation is GA and the scheduler adds
its DynamicResources plugin to every profile on its own.

Run as ``python -m tests.dra.schedulerbuild`` or let the fixture call ``ensure_scheduler()``.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

from tests.kube.gobuild import (
    KUBERNETES_VERSION,
    BuildError,
    _build,
    _go,
    bin_dir,
    kube_module,
)

NAME = "kube-scheduler"
PACKAGE = "k8s.io/kubernetes/cmd/kube-scheduler"
_MINOR = KUBERNETES_VERSION.split(".")[1]
# What `kube-scheduler --version` and the client's user agent report.
LDFLAGS = " ".join(
    f"-X '{pkg}.{key}={value}'"
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
    for key, value in (("gitVersion", KUBERNETES_VERSION), ("gitMajor", "1"), ("gitMinor", _MINOR))
)

__all__ = ["LDFLAGS", "BuildError", "ensure_scheduler", "scheduler_path"]


def scheduler_path() -> Path:
    return bin_dir() / NAME


def _digest() -> str:
    return hashlib.sha256(f"{PACKAGE}@{KUBERNETES_VERSION} {LDFLAGS}".encode()).hexdigest()


def ensure_scheduler() -> Path:
    """The binary, built when missing or stale; raises ``BuildError`` when impossible."""
    out = scheduler_path()
    stamp = out.with_name(out.name + ".sha256")
    digest = _digest()
    if out.exists() and stamp.exists() and stamp.read_text().strip() == digest:
        return out
    if shutil.which("go") is None:
        raise BuildError("the Go toolchain (go) is not on PATH")
    workdir = kube_module(NAME)
    _go(workdir, "get", "-tool", f"{PACKAGE}@{KUBERNETES_VERSION}")
    _build(workdir, PACKAGE, out, "-ldflags", LDFLAGS)
    stamp.write_text(digest + "\n")
    return out


if __name__ == "__main__":
    try:
        print(ensure_scheduler())
    except BuildError as exc:
        sys.exit(f"kube-scheduler build failed: {exc}")
