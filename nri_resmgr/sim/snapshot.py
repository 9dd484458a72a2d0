"""Topology snapshots: the sysfs/procfs files the policies read, as a tar.gz, and back.

``nri-resmgr snapshot-topology > node.tar.gz`` on a production node; ``simulate --machine
node.tar.gz`` anywhere: the archive unpacks into a directory that serves as the host root
(``<root>/sys``, ``<root>/proc``), exactly as ``--host-root`` does for the daemon.

What is captured (``PATTERNS``): CPU and NUMA topology (``nri_resmgr.sysfs`` reads all of
it), plus the CPU cache topology the upstream pool tree uses for L3 levels, and
``/proc/meminfo`` (read when the kernel has no NUMA nodes); of the meminfo files only the
``MemTotal`` line is kept. Nothing else: no process, cgroup, device or usage information
leaves the node. The archive is deterministic (sorted, mtime 0): the same node, same bytes.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
import zlib
from pathlib import Path, PurePosixPath
from typing import Any

from nri_resmgr import __version__
from nri_resmgr.errors import ResmgrError

__all__ = ["MANIFEST", "PATTERNS", "SnapshotError", "extract_snapshot", "take_snapshot"]

MANIFEST = "nri-resmgr-snapshot.json"
_CPU = "sys/devices/system/cpu"
_NODE = "sys/devices/system/node"
PATTERNS = (
    f"{_CPU}/online",
    f"{_CPU}/possible",
    f"{_CPU}/present",
    f"{_CPU}/isolated",
    f"{_CPU}/cpu[0-9]*/online",
    f"{_CPU}/cpu[0-9]*/topology/*",
    f"{_CPU}/cpu[0-9]*/cache/index[0-9]*/level",
    f"{_CPU}/cpu[0-9]*/cache/index[0-9]*/type",
    f"{_CPU}/cpu[0-9]*/cache/index[0-9]*/id",
    f"{_CPU}/cpu[0-9]*/cache/index[0-9]*/size",
    f"{_CPU}/cpu[0-9]*/cache/index[0-9]*/shared_cpu_list",
    f"{_NODE}/online",
    f"{_NODE}/possible",
    f"{_NODE}/has_cpu",
    f"{_NODE}/has_memory",
    f"{_NODE}/node[0-9]*/cpulist",
    f"{_NODE}/node[0-9]*/meminfo",
    f"{_NODE}/node[0-9]*/distance",
    "proc/meminfo",
)
_TOP_DIRS = ("sys", "proc")
# An archive is checked member by member as its headers are read, and refused at the first
# bound crossed, before that member's data is decompressed: a small archive must not unpack
# into gigabytes or millions of files. A sysfs file holds at most a page; a node of 8,192
# CPUs (the kernel's NR_CPUS maximum) snapshots to about 400,000 files of a few bytes each.
MAX_MEMBERS = 500_000
MAX_MEMBER_BYTES = 64 << 10
MAX_TOTAL_BYTES = 64 << 20
MAX_TAR_BYTES = MAX_TOTAL_BYTES + 3 * 512 * MAX_MEMBERS
"""The unpacked stream: the data, and per member a header, a name header and padding."""
MAX_READ = 1 << 20
"""tarfile reads headers and data in small pieces; only a long-name or pax header (which it
reads whole into memory) comes as one big read."""


class SnapshotError(ResmgrError):
    """Not a readable topology snapshot, or one that holds more than topology files."""


def take_snapshot(host_root: str = "") -> bytes:
    """The tar.gz of every ``PATTERNS`` file under ``host_root`` (``/`` when empty)."""
    root = Path(host_root or "/")
    if not (root / _CPU / "online").is_file():
        raise SnapshotError(f"{root / _CPU / 'online'}: not found; is {root} a host root?")
    files: dict[str, bytes] = {}
    for pattern in PATTERNS:
        for path in root.glob(pattern):
            content = _read(path)
            if content is not None:
                files[path.relative_to(root).as_posix()] = content
    # In a DaemonSet pod the node's name is NODE_NAME; uname would give the pod's.
    node = os.environ.get("NODE_NAME") or os.uname().nodename
    manifest = {"nri-resmgr": __version__, "hostname": node, "files": len(files)}
    files[MANIFEST] = json.dumps(manifest, indent=1).encode() + b"\n"
    out = io.BytesIO()
    # mtime 0 in the gzip header and in every member: the same node gives the same bytes.
    with (
        gzip.GzipFile(fileobj=out, mode="wb", compresslevel=9, mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w") as tar,
    ):
        for name in sorted(files):
            info = tarfile.TarInfo(name)
            info.size = len(files[name])
            info.mode = 0o444
            tar.addfile(info, io.BytesIO(files[name]))
    return out.getvalue()


def _read(path: Path) -> bytes | None:
    # sysfs files claim a size of 4096 whatever they hold, and some refuse reads (EINVAL,
    # EACCES): read what they give and skip the ones that give nothing.
    try:
        content = path.read_bytes() if path.is_file() else None
    except OSError:
        return None
    if content is not None and path.name == "meminfo":
        # Only the size is topology; the rest is this moment's usage.
        content = b"".join(line for line in content.splitlines(True) if b"MemTotal:" in line)
    return content


def extract_snapshot(archive: Path, into: Path) -> dict[str, object]:
    """Unpack ``archive`` into ``into`` (the host root to use); return its manifest."""
    try:
        with _unpacked(archive) as stream, tarfile.open(fileobj=stream, mode="r:") as tar:
            members = _checked_members(archive, tar)
            tar.extractall(into, members=members, filter="data")
    except (OSError, tarfile.TarError, EOFError, zlib.error) as exc:
        raise SnapshotError(f"{archive}: cannot read the topology snapshot: {exc}") from exc
    if not (into / _CPU / "online").is_file():
        raise SnapshotError(f"{archive}: not a topology snapshot (no {_CPU}/online)")
    try:
        manifest = json.loads((into / MANIFEST).read_text())
    except (OSError, ValueError):
        manifest = {}
    return manifest if isinstance(manifest, dict) else {}


def _unpacked(archive: Path) -> io.BufferedReader:
    """The tar stream of ``archive`` (gzip, as ``take_snapshot`` writes it, or plain tar),
    bounded by ``MAX_TAR_BYTES`` and ``MAX_READ``."""
    with archive.open("rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
    raw: io.RawIOBase | gzip.GzipFile = (
        gzip.GzipFile(archive, "rb") if gzipped else io.FileIO(archive, "rb")
    )
    return io.BufferedReader(_Bounded(archive, raw), buffer_size=512)


class _Bounded(io.RawIOBase):
    def __init__(self, archive: Path, raw: io.RawIOBase | gzip.GzipFile) -> None:
        self._archive = archive
        self._raw = raw

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        size = len(buffer)
        if size > MAX_READ:
            raise SnapshotError(f"{self._archive}: a tar header of over {MAX_READ} bytes")
        if self._raw.tell() + size > MAX_TAR_BYTES:
            raise SnapshotError(f"{self._archive}: unpacks to more than {MAX_TAR_BYTES} bytes")
        data = self._raw.read(size)
        buffer[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._raw.seek(offset, whence)

    def tell(self) -> int:
        return self._raw.tell()

    def close(self) -> None:
        self._raw.close()
        super().close()


def _checked_members(archive: Path, tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    members: list[tarfile.TarInfo] = []
    total = 0
    for member in tar:  # reads one header at a time, skipping the data already read
        _check_member(archive, member)
        members.append(member)
        total += member.size
        if len(members) > MAX_MEMBERS:
            raise SnapshotError(f"{archive}: more than {MAX_MEMBERS} members")
        if member.size > MAX_MEMBER_BYTES:
            raise SnapshotError(
                f"{archive}: member {member.name!r} is {member.size} bytes; a topology file "
                f"is at most {MAX_MEMBER_BYTES}"
            )
        if total > MAX_TOTAL_BYTES:
            raise SnapshotError(f"{archive}: members larger than {MAX_TOTAL_BYTES} bytes in all")
    return members


def _check_member(archive: Path, member: tarfile.TarInfo) -> None:
    path = PurePosixPath(member.name)
    top = path.parts[0] if path.parts else ""
    if path.is_absolute() or ".." in path.parts:
        raise SnapshotError(f"{archive}: member {member.name!r} points outside the snapshot")
    if not (member.isfile() or member.isdir()):
        raise SnapshotError(f"{archive}: member {member.name!r} is not a plain file")
    if member.name != MANIFEST and top not in _TOP_DIRS:
        raise SnapshotError(f"{archive}: member {member.name!r} is not a sysfs/procfs file")
