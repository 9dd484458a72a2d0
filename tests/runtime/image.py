"""The project's image, built for real from the Dockerfile with buildah (vfs storage, chroot
isolation) on a base image made locally with mmdebstrap (Debian bookworm, python3.11): no
registry is pulled from.

Everything is cached under ``$NRI_RESMGR_CACHE/image``: the base rootfs tar, the buildah
storage, and the built image as an OCI archive stamped with a hash of the build inputs, so a
rerun with unchanged sources reuses it. The build sees the host's ``/etc/pip.conf`` and CA
certificates (bind mounts at build time, not in the Dockerfile), so pip reaches PyPI the way
the host does.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.conformance.build import cache_dir
from tests.runtime.build import PeerUnavailable, build_lock, ensure_packages

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "localhost/nri-resmgr:test"
BASE = "localhost/nri-resmgr-base"
IMAGE_PACKAGES = {"buildah": "buildah", "mmdebstrap": "mmdebstrap"}
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
INPUTS = ("Dockerfile", "pyproject.toml", "README.md", "requirements", "nri_resmgr")


def image_dir() -> Path:
    return cache_dir() / "image"


def _run(*cmd: str) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-20:])
        raise PeerUnavailable(f"`{' '.join(cmd[:6])} ...` failed:\n{tail}")
    return proc.stdout


def _buildah(*args: str) -> str:
    d = image_dir()
    return _run("buildah", "--storage-driver", "vfs", "--root", str(d / "storage"),
                "--runroot", str(d / "runroot"), *args)  # fmt: skip


def ensure_base() -> str:
    """The base image as ``name@sha256:<digest>``: Debian bookworm with python3 and venv."""
    rootfs = image_dir() / "base-rootfs.tar"
    if not rootfs.exists():
        rootfs.parent.mkdir(parents=True, exist_ok=True)
        tmp = rootfs.with_suffix(".tmp.tar")  # mmdebstrap picks the format by the suffix
        _run("mmdebstrap", "--variant=apt", "--include=python3,python3-venv", "bookworm",
             str(tmp))  # fmt: skip
        tmp.replace(rootfs)
    name = f"{BASE}:bookworm"
    if not _digest(name):
        ctr = _buildah("from", "scratch").strip()
        _buildah("add", ctr, str(rootfs), "/")
        _buildah("config", "--env", f"PATH={BASE_PATH}", "--cmd", "/usr/bin/python3", ctr)
        _buildah("commit", "-q", "--rm", ctr, name)
    return f"{BASE}@{_digest(name)}"


def _digest(name: str) -> str:
    try:
        return _buildah("images", "--digests", "--format", "{{.Digest}}", name).strip()
    except PeerUnavailable:
        return ""


def inputs_hash(base: str) -> str:
    h = hashlib.sha256(base.encode())
    for top in INPUTS:
        path = ROOT / top
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for f in files:
            if "__pycache__" not in f.parts:
                h.update(str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def ensure_image() -> Path:
    """The built image as an OCI archive (rebuilt only when an input changed)."""
    ensure_packages(IMAGE_PACKAGES)
    with build_lock("image"):
        return _ensure_image()


def _ensure_image() -> Path:
    base = ensure_base()
    archive = image_dir() / "nri-resmgr.oci.tar"
    stamp = archive.with_suffix(".sha256")
    digest = inputs_hash(base)
    if archive.exists() and stamp.exists() and stamp.read_text().strip() == digest:
        return archive
    started = time.monotonic()
    mounts = [f"{p}:{p}:ro" for p in ("/etc/pip.conf", "/etc/ssl/certs") if Path(p).exists()]
    _buildah("bud", "--isolation", "chroot", "--network", "host", "--layers=false",
             "--build-arg", f"BASE_IMAGE={base}", *(a for m in mounts for a in ("-v", m)),
             "-t", IMAGE, "-f", str(ROOT / "Dockerfile"), str(ROOT))  # fmt: skip
    tmp = archive.with_suffix(f".{os.getpid()}.tmp")
    _buildah("push", "-q", IMAGE, f"oci-archive:{tmp}:{IMAGE}")
    tmp.replace(archive)
    _buildah("rmi", "--prune")  # the previous build, now untagged
    stamp.write_text(digest + "\n")
    print(f"built {IMAGE} in {time.monotonic() - started:.0f}s", file=sys.stderr)
    return archive


if __name__ == "__main__":
    print(ensure_image())
