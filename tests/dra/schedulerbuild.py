"""Builds kube-scheduler (``k8s.io/kubernetes/cmd/kube-scheduler``) into the peer cache.

The wrapper-module approach of ``tests/kube/gobuild.py`` (kube-apiserver) and
``tests/dra/kubeletbuild.py`` (the kubelet DRA peer), with their Go caches, so the Kubernetes
packages the three share compile once. One binary per Kubernetes version
(``bin/kube-scheduler-<version>``), stamped with the version ldflags kube's own build uses
(without them ``--version`` says v0.0.0-master) and rebuilt when the version or the flags
change (hash stamp).

No feature gates are needed: DynamicResourceAllocation is GA since 1.34 and the scheduler adds
its DynamicResources plugin to every profile on its own; consumable capacity
(``DRAConsumableCapacity``) is beta and on by default from 1.36, off in 1.35.

Run as ``python -m tests.dra.schedulerbuild [VERSION ...]`` or let the fixture call
``ensure_scheduler()``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.kube.gobuild import (
    KUBERNETES_VERSION,
    BuildError,
    ensure_kube_command,
    versioned_path,
)

NAME = "kube-scheduler"
PACKAGE = "k8s.io/kubernetes/cmd/kube-scheduler"

__all__ = ["BuildError", "ensure_scheduler", "scheduler_path"]


def scheduler_path(version: str = KUBERNETES_VERSION) -> Path:
    return versioned_path(NAME, version)


def ensure_scheduler(version: str = KUBERNETES_VERSION) -> Path:
    """The binary, built when missing or stale; raises ``BuildError`` when impossible."""
    return ensure_kube_command(NAME, PACKAGE, version)


if __name__ == "__main__":
    try:
        for wanted in sys.argv[1:] or [KUBERNETES_VERSION]:
            print(ensure_scheduler(wanted))
    except BuildError as exc:
        sys.exit(f"kube-scheduler build failed: {exc}")
