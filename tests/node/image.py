"""The guest's disk image: Debian bookworm (minbase) with its kernel, python3, runc and tini,
made with mmdebstrap and packed into a sparse ext4 file with ``mke2fs -d`` (no loop device).

It is cached under ``$NRI_RESMGR_CACHE/node/image-<key>/`` (``vmlinuz``, ``initrd.img``,
``rootfs.ext4``), the key a hash of everything that goes into it (suite, packages, mirror,
the PID-1 script), built under a temporary name and renamed when complete. The guest boots
it with ``-kernel``/``-initrd`` and ``snapshot=on``: the cached file is never written.
Everything the tests change between runs (containerd, the project, the agent) comes in
through the 9p share instead, so editing them does not rebuild the image.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import time
from pathlib import Path

import attrs

from tests.conformance.build import cache_dir
from tests.runtime.build import PeerUnavailable, build_lock, ensure_packages

HERE = Path(__file__).resolve().parent
INIT = HERE / "guest_init.sh"
HOST_PACKAGES = {
    "mmdebstrap": "mmdebstrap",
    "qemu-system-x86": "qemu-system-x86_64",
    "qemu-utils": "qemu-img",
    "e2fsprogs": "mke2fs",
}
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
PACKAGES = ("linux-image-amd64", "python3", "runc", "tini", "iproute2", "procps", "kmod")
DISK_SIZE = "3G"
# Documentation and translations: nothing in the guest reads them, mke2fs -d copies less.
EXCLUDES = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/locale/*", "/usr/share/info/*")


@attrs.frozen
class GuestImage:
    """A built image: the kernel and initrd to boot, the root filesystem to boot them on."""

    kernel: Path
    initrd: Path
    rootfs: Path


def image_key() -> str:
    h = hashlib.sha256()
    for part in (SUITE, MIRROR, DISK_SIZE, *PACKAGES, *EXCLUDES):
        h.update(part.encode() + b"\0")
    h.update(INIT.read_bytes())
    return h.hexdigest()[:16]


def image_dir() -> Path:
    return cache_dir() / "node" / f"image-{image_key()}"


def ensure_image() -> GuestImage:
    """The guest image, built on first use (minutes: packages from the Debian mirror)."""
    out = image_dir()
    image = GuestImage(out / "vmlinuz", out / "initrd.img", out / "rootfs.ext4")
    if image.rootfs.exists():
        return image
    ensure_packages(HOST_PACKAGES)
    with build_lock(out.name):
        if not image.rootfs.exists():
            _build(out)
    return image


def _build(out: Path) -> None:
    started = time.monotonic()
    tmp = out.with_name(out.name + ".tmp")
    tree = out.with_name(out.name + ".tree")
    _remove_tree(tree)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        _run(
            "nice", "-n", "10", "mmdebstrap", "--mode=root", "--variant=minbase",
            f"--include={','.join(PACKAGES)}",
            *(f"--dpkgopt=path-exclude={p}" for p in EXCLUDES),
            f"--customize-hook=copy-in {INIT} /sbin",
            "--customize-hook=chmod 755 $1/sbin/guest_init.sh",
            SUITE, str(tree), MIRROR,
        )  # fmt: skip
        boot = tree / "boot"
        shutil.copy(_one(boot, "vmlinuz-*"), tmp / "vmlinuz")
        shutil.copy(_one(boot, "initrd.img-*"), tmp / "initrd.img")
        rootfs = tmp / "rootfs.ext4"
        _run("truncate", "-s", DISK_SIZE, str(rootfs))
        _run("nice", "-n", "10", "mke2fs", "-q", "-t", "ext4", "-L", "nri-node", "-d", str(tree),
             "-F", str(rootfs))  # fmt: skip
        tmp.rename(out)
    finally:
        _remove_tree(tree)
        shutil.rmtree(tmp, ignore_errors=True)
    took = time.monotonic() - started
    print(f"built the guest image {out.name} in {took:.0f}s", file=sys.stderr)


def _mounts_under(path: Path) -> list[str]:
    prefix = str(path) + "/"
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True)


def _remove_tree(tree: Path) -> None:
    """Remove mmdebstrap's tree, never through a mount it left (its /dev is the host's)."""
    for point in _mounts_under(tree):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)
    if _mounts_under(tree):
        print(f"left {tree} in place: still mounted inside", file=sys.stderr)
        return
    shutil.rmtree(tree, ignore_errors=True)


def _one(directory: Path, pattern: str) -> Path:
    found = sorted(directory.glob(pattern))
    if len(found) != 1:
        raise PeerUnavailable(f"expected one {pattern} in {directory}, found {found}")
    return found[0]


def _run(*cmd: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-20:])
        raise PeerUnavailable(f"`{' '.join(cmd[:8])} ...` failed:\n{tail}")


if __name__ == "__main__":
    print(ensure_image())
