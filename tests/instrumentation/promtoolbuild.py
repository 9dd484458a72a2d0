"""Builds Prometheus' ``promtool`` from its published Go module into the peer cache.

``go install github.com/prometheus/prometheus/cmd/promtool@<version>`` needs no main module of
ours (the module has no replace directives). The ``remove_all_sd`` build tag leaves out the
service-discovery plugins (cloud SDKs) that ``check metrics`` never uses, which keeps the
download and the build small. The binary lands in ``$NRI_RESMGR_CACHE/bin/promtool`` (built
under a temporary name, then renamed) and is reused while it reports the pinned version,
stamped with ``-X`` as Prometheus' own release build stamps it. Go's module and build caches
are the ones the NRI harness builds use (``$NRI_RESMGR_CACHE/go``).

Run as ``python -m tests.instrumentation.promtoolbuild`` or let the test call
``ensure_promtool()``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.kube.gobuild import BuildError, bin_dir, cache_dir

PROMETHEUS_MODULE = "github.com/prometheus/prometheus"
# The Go module of Prometheus 3.x is versioned v0.3XX.Y for release 3.XX.Y.
PROMETHEUS_VERSION = "v0.316.0"
STAMP = PROMETHEUS_VERSION.removeprefix("v")


def promtool_path() -> Path:
    return bin_dir() / "promtool"


def installed_version(binary: Path) -> str | None:
    if not binary.exists():
        return None
    result = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=False)
    first = (result.stdout or result.stderr).splitlines()[:1]
    # "promtool, version 0.316.0 (branch: ..., revision: ...)"
    return first[0].split()[2] if first and len(first[0].split()) > 2 else None


def ensure_promtool() -> Path:
    """The cached promtool, built first if missing or of another version."""
    binary = promtool_path()
    if installed_version(binary) == STAMP:
        return binary
    go = shutil.which("go")
    if go is None:
        raise BuildError("the Go toolchain (go) is not on PATH, and no cached promtool exists")
    binary.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=binary.parent, prefix=".promtool-") as gobin:
        go_cache = cache_dir() / "go"  # shared with the NRI harness builds
        env = {**os.environ, "GOBIN": gobin, "GOFLAGS": "-buildvcs=false",
               "GOTOOLCHAIN": "local", "CGO_ENABLED": "0",
               "GOMODCACHE": str(go_cache / "mod"), "GOCACHE": str(go_cache / "build")}  # fmt: skip
        stamp = f"-X github.com/prometheus/common/version.Version={STAMP}"
        cmd = [go, "install", "-trimpath", "-tags", "remove_all_sd",
               f"-ldflags=-s -w {stamp}",
               f"{PROMETHEUS_MODULE}/cmd/promtool@{PROMETHEUS_VERSION}"]  # fmt: skip
        if shutil.which("nice"):
            cmd = ["nice", "-n", "10", *cmd]  # the machine is shared
        result = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise BuildError(f"{' '.join(cmd)} failed:\n{result.stderr[-4000:]}")
        (Path(gobin) / "promtool").replace(binary)  # atomic: never a half-written binary
    version = installed_version(binary)
    if version != STAMP:
        raise BuildError(f"built {binary} reports version {version!r}, not {STAMP}")
    return binary


if __name__ == "__main__":
    try:
        print(ensure_promtool())
    except BuildError as exc:
        sys.exit(f"promtool build failed: {exc}")
