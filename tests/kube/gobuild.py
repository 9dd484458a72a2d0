"""Builds kube-apiserver and etcd from their published Go modules into the peer cache.

k8s.io/kubernetes cannot be ``go install``-ed by version: its go.mod points the k8s.io staging
modules at ./staging through replace directives, which only a main module may carry. So each
binary gets a throwaway main module in the cache that requires the upstream module (and, for
Kubernetes, replaces every staging module by its published v0.x twin) and builds the command
from the module cache. Each Kubernetes version (``KUBERNETES_VERSIONS``; ``KUBERNETES_VERSION``
is the suite's default) builds into its own wrapper module (``build/<name>-<version>``) and
binary (``bin/<name>-<version>``), stamped with kube's version ldflags (so ``--version`` tells
the truth) and a hash of what was built; a binary whose stamp matches is reused.

Run as ``python -m tests.kube.gobuild [VERSION ...]`` (the nox ``apiserver`` session does) or
let the integration fixture call ``ensure_binaries()``.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

KUBERNETES_VERSION = "v1.35.4"
"""The suite's default Kubernetes peers (the session API server, kubelet's DRA code)."""
KUBERNETES_VERSIONS = ("v1.35.4", "v1.36.3", "v1.37.2")
"""Every version the suite or a nox session runs a real peer of."""
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


def versioned_path(name: str, version: str) -> Path:
    """Where the peer ``name`` built from Kubernetes ``version`` lives."""
    if version not in KUBERNETES_VERSIONS:
        raise BuildError(f"Kubernetes {version} is not one of {', '.join(KUBERNETES_VERSIONS)}")
    return bin_dir() / f"{name}-{version}"


def kube_apiserver_path(version: str = KUBERNETES_VERSION) -> Path:
    return versioned_path("kube-apiserver", version)


def etcd_path() -> Path:
    return bin_dir() / "etcd"


def ensure_binaries(version: str = KUBERNETES_VERSION) -> tuple[Path, Path]:
    """Both binaries, built on first use; raises ``BuildError`` when a build is impossible."""
    return ensure_kube_apiserver(version), ensure_etcd()


def ensure_etcd() -> Path:
    out = etcd_path()
    if not out.exists():
        _need_go()
        workdir = _fresh_module("etcd")
        _go(workdir, "get", "-tool", f"{ETCD_PKG}@{ETCD_VERSION}")
        _build(workdir, ETCD_PKG, out)
    return out


def ensure_kube_apiserver(version: str = KUBERNETES_VERSION) -> Path:
    return ensure_kube_command("kube-apiserver", KUBE_APISERVER_PKG, version)


def ensure_kube_command(name: str, package: str, version: str) -> Path:
    """``package`` (a command of k8s.io/kubernetes) at ``version``, with kube's version
    ldflags, built when missing or stale."""
    out = versioned_path(name, version)
    flags = ("-ldflags", version_ldflags(version))
    digest = build_digest(f"{package}@{version}", *flags)
    if is_current(out, digest):
        return out
    workdir = kube_module(name, version)
    _go(workdir, "get", "-tool", f"{package}@{version}")
    _build(workdir, package, out, *flags)
    stamp(out, digest)
    return out


def version_ldflags(version: str) -> str:
    """What ``--version`` and the client's user agent report (kube's own build sets them;
    without them a binary says v0.0.0-master)."""
    minor = version.split(".")[1]
    return " ".join(
        f"-X '{pkg}.{key}={value}'"
        for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
        for key, value in (("gitVersion", version), ("gitMajor", "1"), ("gitMinor", minor))
    )


def build_digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()


def _stamp_path(out: Path) -> Path:
    return out.with_name(out.name + ".sha256")


def is_current(out: Path, digest: str) -> bool:
    """Whether ``out`` exists and was built from what ``digest`` hashes; raises
    ``BuildError`` when it must be built and cannot (no Go)."""
    stamp_file = _stamp_path(out)
    if out.exists() and stamp_file.exists() and stamp_file.read_text().strip() == digest:
        return True
    _need_go()
    return False


def stamp(out: Path, digest: str) -> None:
    _stamp_path(out).write_text(digest + "\n")


def _need_go() -> None:
    if shutil.which("go") is None:
        raise BuildError("the Go toolchain (go) is not on PATH")


def staging_version(version: str) -> str:
    """What k8s.io/kubernetes' staging modules (api, client-go, ...) are published as."""
    return "v0." + version.removeprefix("v1.")


STAGING_VERSION = staging_version(KUBERNETES_VERSION)


def kube_module(name: str, version: str = KUBERNETES_VERSION) -> Path:
    """A fresh wrapper module requiring nothing yet, with every staging module of
    k8s.io/kubernetes@version replaced by its published twin: the base the kube-apiserver,
    kubelet-peer and kube-scheduler builds share (and their Go caches). One directory per
    name and version, so builds of other versions (other worktrees) are left alone."""
    workdir = _fresh_module(f"{name}-{version}")
    _go(workdir, "mod", "download", f"k8s.io/kubernetes@{version}")
    modules = _staging_modules(_upstream_go_mod(workdir, version))
    _write_replaces(workdir, modules, staging_version(version))
    return workdir


def _fresh_module(name: str) -> Path:
    workdir = cache_dir() / "build" / name
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    module = re.sub(r"[^A-Za-z0-9._/-]", "-", name)
    (workdir / "go.mod").write_text(f"module nri-resmgr.local/build/{module}\n\ngo 1.25.0\n")
    return workdir


def _upstream_go_mod(workdir: Path, version: str) -> str:
    gomod = _go(workdir, "mod", "download", "-json", f"k8s.io/kubernetes@{version}")
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


def _go(workdir: Path, *args: str, nice: bool = False, env: dict[str, str] | None = None) -> str:
    env = os.environ | {"GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"} | (env or {})
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
        for wanted in sys.argv[1:] or [KUBERNETES_VERSION]:
            for path in ensure_binaries(wanted):
                print(path)
    except BuildError as exc:
        sys.exit(f"peer build failed: {exc}")
