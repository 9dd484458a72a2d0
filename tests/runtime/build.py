"""The real-runtime peers: containerd v2 (with ctr and the runc shim) and crictl, built from
their published Go modules into the peer cache, and the Debian packages they run on.

Binaries land in ``$NRI_RESMGR_CACHE/runtime/containerd-<version>/``; the directory is filled
under a temporary name and renamed when every binary is there, so a half-built set never
looks cached. Debian's runc and busybox-static are installed with apt when missing (root
only). Run ``python -m tests.runtime.build`` to build ahead of the tests.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from tests.conformance.build import BuildError, cache_dir, go_env, go_tool

CONTAINERD_VERSION = "v2.2.9"
CRICTL_VERSION = "v1.34.0"
CONTAINERD_PKG = "github.com/containerd/containerd/v2"
CRICTL_PKG = "sigs.k8s.io/cri-tools"
BINARIES = ("containerd", "ctr", "containerd-shim-runc-v2", "crictl")


class PeerUnavailable(RuntimeError):
    """A part of the real-runtime setup cannot be built or installed on this machine."""


def runtime_dir(version: str = CONTAINERD_VERSION) -> Path:
    return cache_dir() / "runtime" / f"containerd-{version}"


@contextlib.contextmanager
def build_lock(name: str) -> Iterator[None]:
    """One builder at a time per peer across concurrent test sessions sharing the cache."""
    path = cache_dir() / "runtime" / f".{name}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def ensure_containerd(version: str = CONTAINERD_VERSION) -> Path:
    """The directory holding containerd ``version`` (a v2 release), ctr, the runc shim and
    crictl; built on first use."""
    out = runtime_dir(version)
    if all((out / b).exists() for b in BINARIES):
        return out
    with build_lock(out.name):
        if not all((out / b).exists() for b in BINARIES):
            _build_containerd(out, version)
    return out


def _build_containerd(out: Path, version: str) -> None:
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    started = time.monotonic()
    ldflags = f"-s -w -X {CONTAINERD_PKG}/version.Version={version}"
    ldflags += f" -X {CONTAINERD_PKG}/version.Package={CONTAINERD_PKG}"
    at = f"@{version}"
    _install(
        tmp,
        "urfave_cli_no_docs no_btrfs",
        ldflags,
        f"{CONTAINERD_PKG}/cmd/containerd{at}",
        f"{CONTAINERD_PKG}/cmd/ctr{at}",
    )
    # The shim speaks ttrpc only; no_grpc keeps gRPC out of every per-pod process.
    _install(
        tmp,
        "urfave_cli_no_docs no_btrfs no_grpc",
        ldflags,
        f"{CONTAINERD_PKG}/cmd/containerd-shim-runc-v2{at}",
    )
    crictl_ldflags = f"-s -w -X {CRICTL_PKG}/pkg/version.Version={CRICTL_VERSION}"
    _install(tmp, "", crictl_ldflags, f"{CRICTL_PKG}/cmd/crictl@{CRICTL_VERSION}")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    print(
        f"built containerd {version} + crictl in {time.monotonic() - started:.0f}s",
        file=sys.stderr,
    )


LEGACY_VERSION = "v1.7.24"  # the last 1.7 release on NRI v0.6.1 (v1.7.27+ vendor v0.8.0)
LEGACY_PKG = "github.com/containerd/containerd"
LEGACY_BINARIES = ("containerd", "ctr", "containerd-shim-runc-v2")


def legacy_dir() -> Path:
    return cache_dir() / "runtime" / f"containerd-{LEGACY_VERSION}"


def ensure_legacy_containerd() -> Path:
    """containerd 1.7 (NRI v0.6: events as StateChange), its ctr and shim; crictl is v2's.

    Its go.mod carries exclude directives, so ``go install pkg@version`` refuses it: the
    commands are built from a throwaway main module that requires it, as tests/kube does.
    """
    out = legacy_dir()
    if all((out / b).exists() for b in LEGACY_BINARIES):
        return out
    with build_lock(out.name):
        if not all((out / b).exists() for b in LEGACY_BINARIES):
            _build_legacy(out)
    return out


def _build_legacy(out: Path) -> None:
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    module = cache_dir() / "build" / f"containerd-{LEGACY_VERSION}"
    shutil.rmtree(module, ignore_errors=True)
    module.mkdir(parents=True)
    (module / "go.mod").write_text("module nri-resmgr.local/build/containerd17\n\ngo 1.23\n")
    started = time.monotonic()
    _go(module, "get", f"{LEGACY_PKG}@{LEGACY_VERSION}")
    ldflags = f"-s -w -X {LEGACY_PKG}/version.Version={LEGACY_VERSION}"
    ldflags += f" -X {LEGACY_PKG}/version.Package={LEGACY_PKG}"
    for name in LEGACY_BINARIES:
        _go(module, "build", "-trimpath", "-tags", "urfave_cli_no_docs no_btrfs",
            "-ldflags", ldflags, "-o", str(tmp / name), f"{LEGACY_PKG}/cmd/{name}")  # fmt: skip
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    took = time.monotonic() - started
    print(f"built containerd {LEGACY_VERSION} in {took:.0f}s", file=sys.stderr)


def _go_tool() -> str:
    try:
        return go_tool()
    except BuildError as exc:
        raise PeerUnavailable(str(exc)) from exc


def _go(cwd: Path, *args: str) -> None:
    cmd = [_go_tool(), *args]
    if shutil.which("nice"):
        cmd = ["nice", "-n", "10", *cmd]
    proc = subprocess.run(cmd, cwd=cwd, env=go_env(), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise PeerUnavailable(f"`go {' '.join(args[:2])}` in {cwd} failed:\n{tail}")


def _install(gobin: Path, tags: str, ldflags: str, *packages: str) -> None:
    cmd = ["go", "install", "-trimpath", "-ldflags", ldflags]
    if tags:
        cmd += ["-tags", tags]
    cmd = [_go_tool(), *cmd[1:], *packages]
    if shutil.which("nice"):
        cmd = ["nice", "-n", "10", *cmd]
    env = go_env() | {"GOBIN": str(gobin)}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise PeerUnavailable(f"`go install {' '.join(packages)}` failed:\n{tail}")


_apt_updated = False


def ensure_packages(packages: dict[str, str]) -> None:
    """Install the Debian packages whose command (the dict's value) is not on PATH."""
    global _apt_updated
    missing = [pkg for pkg, command in packages.items() if shutil.which(command) is None]
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise PeerUnavailable(f"need the Debian packages {missing} (apt-get, as root)")
    env = os.environ | {"DEBIAN_FRONTEND": "noninteractive"}
    steps = [["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing]]
    if not _apt_updated:
        steps.insert(0, ["apt-get", "update", "-q"])
    for cmd in steps:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise PeerUnavailable(f"`{' '.join(cmd)}` failed:\n{proc.stderr.strip()[-2000:]}")
    _apt_updated = True


RUNTIME_PACKAGES = {"runc": "runc", "busybox-static": "busybox"}


def main() -> None:
    ensure_packages(RUNTIME_PACKAGES)
    print(ensure_containerd())
    print(ensure_legacy_containerd())


if __name__ == "__main__":
    main()
