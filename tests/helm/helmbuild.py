"""Builds the real ``helm`` from its published Go module into the peer cache.

``go install helm.sh/helm/v4/cmd/helm@<version>`` needs no main module of ours; the binary
lands in ``$NRI_RESMGR_CACHE/bin/helm`` and is reused while it reports the pinned version.
The version is stamped with ``-X`` as helm's own release build does; a plain ``go install``
would report only the source default (``v4.3``).

Run as ``python -m tests.helm.helmbuild`` (the nox ``helm`` session does) or let the test
fixture call ``ensure_helm()``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

HELM_MODULE = "helm.sh/helm/v4"
HELM_VERSION = "v4.3.2"


class HelmBuildError(RuntimeError):
    """helm could not be built; the message says why."""


def cache_dir() -> Path:
    default = Path.home() / ".cache" / "nri-resmgr"
    return Path(os.environ.get("NRI_RESMGR_CACHE") or default)


def helm_path() -> Path:
    return cache_dir() / "bin" / "helm"


def installed_version(binary: Path) -> str | None:
    if not binary.exists():
        return None
    result = subprocess.run(
        [str(binary), "version", "--template", "{{.Version}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    return result.stdout.strip() if result.returncode == 0 else None


def ensure_helm() -> Path:
    """The cached helm binary, built first if missing or of another version."""
    binary = helm_path()
    if installed_version(binary) == HELM_VERSION:
        return binary
    go = shutil.which("go")
    if go is None:
        raise HelmBuildError("the Go toolchain (go) is not on PATH, and no cached helm exists")
    binary.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOBIN": str(binary.parent), "GOFLAGS": "-buildvcs=false"}
    stamp = f"-X {HELM_MODULE}/internal/version.version={HELM_VERSION}"
    cmd = [
        go,
        "install",
        "-trimpath",
        f"-ldflags=-s -w {stamp}",
        f"{HELM_MODULE}/cmd/helm@{HELM_VERSION}",
    ]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise HelmBuildError(f"{' '.join(cmd)} failed:\n{result.stderr[-4000:]}")
    version = installed_version(binary)
    if version != HELM_VERSION:
        raise HelmBuildError(f"built {binary} reports version {version!r}, not {HELM_VERSION}")
    return binary


if __name__ == "__main__":
    print(ensure_helm())
    sys.exit(0)
