"""Builds kube-apiserver and etcd from their published Go modules into the peer cache.

k8s.io/kubernetes cannot be ``go install``-ed by version: its go.mod points the k8s.io staging
modules at ./staging through replace directives, which only a main module may carry. So each
binary gets a throwaway main module in the cache that requires the upstream module (and, for
Kubernetes, replaces every staging module by its published v0.x twin) and builds the command
from the module cache. A binary already present is reused; delete it to rebuild.

Run as ``python -m tests.kube.gobuild`` (the nox ``apiserver`` session does) or let the
integration fixture call ``ensure_binaries()``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

KUBERNETES_VERSION = "v1.35.4"
ETCD_VERSION = "v3.6.16"
KUBE_APISERVER_PKG = "k8s.io/kubernetes/cmd/kube-apiserver"
ETCD_PKG = "go.etcd.io/etcd/server/v3"


class BuildError(RuntimeError):
    """A peer binary could not be built; the message says which step failed and why."""


def cache_dir() -> Path:
    default = Path.home() / ".cache" / "nri-resmgr"
    return Path(os.environ.get("NRI_RESMGR_CACHE") or default)


def bin_dir() -> Path:
    return cache_dir() / "bin"


def kube_apiserver_path() -> Path:
    return bin_dir() / "kube-apiserver"


def etcd_path() -> Path:
    return bin_dir() / "etcd"


def ensure_binaries() -> tuple[Path, Path]:
    """Both binaries, built on first use; raises ``BuildError`` when a build is impossible."""
    if shutil.which("go") is None:
        if kube_apiserver_path().exists() and etcd_path().exists():
            return kube_apiserver_path(), etcd_path()
        raise BuildError("the Go toolchain (go) is not on PATH")
    return ensure_kube_apiserver(), ensure_etcd()


def ensure_etcd() -> Path:
    out = etcd_path()
    if not out.exists():
        workdir = _fresh_module("etcd")
        _go(workdir, "get", "-tool", f"{ETCD_PKG}@{ETCD_VERSION}")
        _build(workdir, ETCD_PKG, out)
    return out


def ensure_kube_apiserver() -> Path:
    out = kube_apiserver_path()
    if not out.exists():
        workdir = kube_module("kube-apiserver")
        _go(workdir, "get", "-tool", f"{KUBE_APISERVER_PKG}@{KUBERNETES_VERSION}")
        _build(workdir, KUBE_APISERVER_PKG, out)
    return out


STAGING_VERSION = "v0." + KUBERNETES_VERSION.removeprefix("v1.")
"""What k8s.io/kubernetes' staging modules (api, client-go, ...) are published as."""


def kube_module(name: str) -> Path:
    """A fresh wrapper module requiring nothing yet, with every staging module of
    k8s.io/kubernetes@KUBERNETES_VERSION replaced by its published twin: the base the
    kube-apiserver, kubelet-peer and kube-scheduler builds share (and their Go caches)."""
    workdir = _fresh_module(name)
    _go(workdir, "mod", "download", f"k8s.io/kubernetes@{KUBERNETES_VERSION}")
    _write_replaces(workdir, _staging_modules(_upstream_go_mod(workdir)), STAGING_VERSION)
    return workdir


def _fresh_module(name: str) -> Path:
    workdir = cache_dir() / "build" / name
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    (workdir / "go.mod").write_text(f"module nri-resmgr.local/build/{name}\n\ngo 1.25.0\n")
    return workdir


def _upstream_go_mod(workdir: Path) -> str:
    gomod = _go(workdir, "mod", "download", "-json", f"k8s.io/kubernetes@{KUBERNETES_VERSION}")
    match = re.search(r'"GoMod":\s*"([^"]+)"', gomod)
    if not match:
        raise BuildError("go mod download did not report the k8s.io/kubernetes go.mod")
    return Path(match.group(1)).read_text()


def _staging_modules(upstream_go_mod: str) -> list[str]:
    modules = re.findall(r"^\s*(k8s\.io/[\w.-]+)\s*=>\s*\./staging/", upstream_go_mod, re.M)
    if not modules:
        raise BuildError("k8s.io/kubernetes go.mod has no staging replace directives")
    return modules


def _write_replaces(workdir: Path, modules: list[str], version: str) -> None:
    lines = "".join(f"\t{m} => {m} {version}\n" for m in modules)
    with (workdir / "go.mod").open("a") as f:
        f.write(f"\nreplace (\n{lines})\n")


def _build(workdir: Path, package: str, out: Path, *flags: str) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    # One temporary name per process: two test processes building the same peer at once
    # (a fresh cache) must not rename each other's file away.
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    started = time.monotonic()
    _go(workdir, "build", "-trimpath", *flags, "-o", str(tmp), package, nice=True)
    tmp.replace(out)  # atomic: a half-written binary never looks cached
    print(f"built {out} in {time.monotonic() - started:.0f}s", file=sys.stderr)


def _go(workdir: Path, *args: str, nice: bool = False) -> str:
    env = os.environ | {"GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}
    cmd = ["go", *args]
    if nice and shutil.which("nice"):
        cmd = ["nice", "-n", "10", *cmd]
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise BuildError(f"`{' '.join(cmd)}` failed in {workdir}:\n{tail}")
    return proc.stdout


if __name__ == "__main__":
    try:
        for path in ensure_binaries():
            print(path)
    except BuildError as exc:
        sys.exit(f"peer build failed: {exc}")
