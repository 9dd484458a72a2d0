"""What goes into the guest besides its image, each as one tarball (9p is slow per file):

- the runtime: containerd ``CONTAINERD_VERSION`` (the newest 2.4 release on the Go module
  proxy; the host suite keeps 2.2.9), its ctr and runc shim, and crictl, all built from their
  published modules (``tests.runtime.build``);
- the project, installed the way the Dockerfile installs it: a wheel built with the locked
  setuptools and no build isolation, and the locked dependencies with ``--require-hashes``,
  into one ``site-packages`` (``pip install --target`` with the host's Python 3.11, the
  guest's version), byte-compiled here so the guest does not compile at every start;
- the test image (Debian's static busybox as an OCI archive, ``tests.runtime.ociimage``).

The runtime tarball and the locked dependencies are cached under ``$NRI_RESMGR_CACHE/node``
keyed by their inputs; the project's wheel is rebuilt when its sources change.
"""

from __future__ import annotations

import compileall
import hashlib
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from tests.conformance.build import cache_dir
from tests.runtime.build import PeerUnavailable, build_lock, ensure_containerd
from tests.runtime.ociimage import make_image

ROOT = Path(__file__).resolve().parents[2]
CONTAINERD_VERSION = "v2.4.2"
PROJECT_INPUTS = ("pyproject.toml", "README.md", "nri_resmgr")


def node_cache() -> Path:
    return cache_dir() / "node"


def runtime_tarball() -> Path:
    """containerd, ctr, containerd-shim-runc-v2 and crictl as ``bin/*``."""
    bindir = ensure_containerd(CONTAINERD_VERSION)
    out = node_cache() / f"containerd-{CONTAINERD_VERSION}.tar"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        with tarfile.open(tmp, "w") as tar:
            for binary in sorted(bindir.iterdir()):
                tar.add(binary, f"bin/{binary.name}")
        tmp.replace(out)
    return out


def image_tarball() -> Path:
    return make_image(cache_dir() / "runtime" / "busybox-oci.tar")


def project_tarball() -> Path:
    """The project and its locked dependencies as one ``site-packages`` tree."""
    deps = _dependencies()
    digest = _tree_hash([deps.name, *PROJECT_INPUTS])
    out = node_cache() / f"site-{digest[:16]}.tar"
    if out.exists():
        return out
    with build_lock("node-site"):
        if not out.exists():
            _build_site(deps, out)
    return out


def _build_site(deps: Path, out: Path) -> None:
    work = out.with_suffix(".work")
    shutil.rmtree(work, ignore_errors=True)
    site = work / "site"
    shutil.copytree(deps, site, symlinks=True)
    wheels = work / "wheels"
    python = str(_build_venv() / "bin/python")
    _run(python, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(wheels), str(ROOT))  # fmt: skip
    _run(sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile",
         "--target", str(site), *map(str, wheels.glob("*.whl")))  # fmt: skip
    compileall.compile_dir(site, quiet=1, workers=1)
    tmp = out.with_suffix(".tmp")
    with tarfile.open(tmp, "w") as tar:
        tar.add(site, "site")
    tmp.replace(out)
    shutil.rmtree(work, ignore_errors=True)


def _dependencies() -> Path:
    """requirements/runtime.lock installed with hashes into a cached directory."""
    lock = ROOT / "requirements" / "runtime.lock"
    out = node_cache() / f"deps-{hashlib.sha256(lock.read_bytes()).hexdigest()[:16]}"
    if out.exists():
        return out
    with build_lock(out.name):
        if not out.exists():
            tmp = out.with_name(out.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            _run(sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--require-hashes",
                 "--no-compile", "--target", str(tmp), "-r", str(lock))  # fmt: skip
            tmp.rename(out)
    return out


def _build_venv() -> Path:
    """A venv with the locked build requirements (setuptools, wheel), as the Dockerfile's."""
    lock = ROOT / "requirements" / "build.lock"
    out = node_cache() / f"build-venv-{hashlib.sha256(lock.read_bytes()).hexdigest()[:16]}"
    done = out / ".complete"
    if done.exists():
        return out
    with build_lock(out.name):
        if not done.exists():
            shutil.rmtree(out, ignore_errors=True)
            _run(sys.executable, "-m", "venv", str(out))
            _run(str(out / "bin/python"), "-m", "pip", "install", "--quiet", "--require-hashes",
                 "-r", str(lock))  # fmt: skip
            done.touch()
    return out


def _tree_hash(names: list[str]) -> str:
    h = hashlib.sha256()
    for name in names:
        path = ROOT / name
        files = sorted(path.rglob("*")) if path.is_dir() else [path]
        for f in files:
            if f.is_file() and "__pycache__" not in f.parts:
                h.update(str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes())
        if not path.exists():  # the dependencies' directory name stands for their lock
            h.update(name.encode())
    return h.hexdigest()


def _run(*cmd: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-20:])
        raise PeerUnavailable(f"`{' '.join(cmd[:6])} ...` failed:\n{tail}")
