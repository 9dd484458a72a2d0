"""The prepared claims on disk: what Unprepare must release, also after a daemon restart.

One JSON file (``dra-claims.json`` in the state directory, ``/run/nri-resmgr`` by default)
holding every prepared claim. Writes are atomic: a temporary file in the same directory,
rename over the old one; a reader sees the old content or the new, never a half-written file.

Where it lives, and why no fsync there: the record only has to outlive the daemon, not the
machine. After a reboot kubelet restores its own checkpoint with every claim "not prepared"
and calls NodePrepareResources again as it recreates the pods (an Unprepare of a claim we do
not know succeeds), and the CDI specs under ``/var/run/cdi`` are gone with the reboot anyway.
So the default is a tmpfs under ``/run``, and on a tmpfs (detected, ``on_tmpfs``) the data is
not fsynced: there is no disk to reach, and a crash of the daemon does not lose what the
kernel already holds. On any other filesystem (an operator's ``--dra-state-dir``) the data is
fsynced before the rename, so a power loss leaves the old record or the new. The directory is
not fsynced: a rename lost to a power loss leaves the previous, consistent record.
A file that does not parse is never overwritten: the store is marked broken with the reason,
every Prepare/Unprepare answers that reason until an operator removes the file.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs

from nri_resmgr.cpuset import CpuSet, CpuSetError
from nri_resmgr.errors import ResmgrError

log = logging.getLogger(__name__)

STATE_FILE = "dra-claims.json"
FORMAT_VERSION = 1
MEMORY_FILESYSTEMS = frozenset({"tmpfs", "ramfs"})
"""Filesystems whose data dies with the machine: fsync has nothing to make durable."""
MOUNTINFO = Path("/proc/self/mountinfo")
NOT_FSYNCED = "tmpfs, not fsynced: kubelet prepares the claims again after a reboot"


class StateError(ResmgrError):
    """The state file cannot be read, parsed or written; the message names file and cause."""


@attrs.frozen
class PreparedResult:
    """One allocation result of a prepared claim, as answered to kubelet."""

    request: str
    device: str


@attrs.frozen
class ClaimRecord:
    uid: str
    namespace: str
    name: str
    cpus: CpuSet
    results: tuple[PreparedResult, ...]
    cdi_file: str

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "cpus": str(self.cpus),
            "results": [{"request": r.request, "device": r.device} for r in self.results],
            "cdiFile": self.cdi_file,
        }

    @classmethod
    def from_json(cls, uid: str, raw: Mapping[str, Any]) -> ClaimRecord:
        return cls(
            uid=uid,
            namespace=str(raw["namespace"]),
            name=str(raw["name"]),
            cpus=CpuSet.parse(str(raw["cpus"])),
            results=tuple(
                PreparedResult(str(r["request"]), str(r["device"])) for r in raw["results"]
            ),
            cdi_file=str(raw["cdiFile"]),
        )


class ClaimStore:
    """The records, in memory and on disk; the disk is written before memory changes."""

    def __init__(self, directory: str | Path, *, durable: bool | None = None) -> None:
        self.path = Path(directory) / STATE_FILE
        self.durable = not on_tmpfs(self.path.parent) if durable is None else durable
        """fsync before rename; by default only where the file is not on a tmpfs."""
        self.records: dict[str, ClaimRecord] = {}
        self.broken: str | None = None
        """Why the state file cannot be used (then nothing is prepared or unprepared)."""

    def load(self) -> None:
        """Read the file (absent: no claims). A bad file marks the store broken."""
        how = "fsynced: not on a tmpfs" if self.durable else NOT_FSYNCED
        log.info("DRA claims recorded in %s (%s)", self.path, how)
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            self.records = {}
            return
        except OSError as e:
            self._break(f"cannot read DRA state file {self.path}: {e.strerror or e}")
            return
        try:
            self.records = parse(text)
        except (ValueError, KeyError, TypeError, CpuSetError) as e:
            self._break(
                f"DRA state file {self.path} is corrupt or truncated ({describe(e)}); "
                "remove it to start without the claims it recorded"
            )

    def _break(self, reason: str) -> None:
        log.error("%s", reason)
        self.broken = reason
        self.records = {}

    def __iter__(self) -> Iterator[ClaimRecord]:
        return iter(list(self.records.values()))

    def get(self, uid: str) -> ClaimRecord | None:
        return self.records.get(uid)

    def put(self, record: ClaimRecord) -> None:
        self._write({**self.records, record.uid: record})

    def remove(self, uid: str) -> None:
        if uid in self.records:
            self._write({k: v for k, v in self.records.items() if k != uid})

    def _write(self, records: dict[str, ClaimRecord]) -> None:
        if self.broken:
            raise StateError(self.broken)
        body = {
            "version": FORMAT_VERSION,
            "claims": {uid: r.to_json() for uid, r in sorted(records.items())},
        }
        try:
            write_atomically(self.path, json.dumps(body, indent=1).encode(), durable=self.durable)
        except OSError as e:
            raise StateError(f"cannot write DRA state file {self.path}: {e.strerror or e}") from e
        self.records = records


def parse(text: str) -> dict[str, ClaimRecord]:
    body = json.loads(text)
    if not isinstance(body, dict) or body.get("version") != FORMAT_VERSION:
        raise ValueError(f"not a version {FORMAT_VERSION} claim state document")
    claims = body["claims"]
    if not isinstance(claims, dict):
        raise TypeError("claims is not an object")
    return {str(uid): ClaimRecord.from_json(str(uid), raw) for uid, raw in claims.items()}


def write_atomically(path: Path, data: bytes, mode: int = 0o600, *, durable: bool = True) -> None:
    """``path`` holds ``data`` or what it held before, whatever fails when; ``durable``:
    the data reaches the disk before the rename (not needed on tmpfs)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # No .json suffix on the temporary name: CDI scanners read only .json/.yaml files.
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def on_tmpfs(directory: Path) -> bool:
    """Whether ``directory`` (or, if it does not exist yet, its nearest existing parent) is on
    a memory filesystem, from the mount table the process sees (in a container: a hostPath
    of the host's tmpfs shows as tmpfs). Unknown (no mount table) counts as disk."""
    path = Path(os.path.realpath(directory))
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        table = MOUNTINFO.read_text()
    except OSError:
        return False
    best, fstype = "", ""
    for line in table.splitlines():
        # "<id> <parent> <major:minor> <root> <mount point> <options> [tags] - <type> ..."
        fields, _, tail = line.partition(" - ")
        parts = fields.split()
        if len(parts) < 5 or not tail:
            continue
        point = _unescape(parts[4])
        inside = str(path) == point or str(path).startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, fstype = point, tail.split()[0]
    return fstype in MEMORY_FILESYSTEMS


def _unescape(field: str) -> str:
    """Mount points in mountinfo have space, tab, newline and backslash as octal escapes."""
    for code in ("\\040", "\\011", "\\012", "\\134"):
        field = field.replace(code, chr(int(code[1:], 8)))
    return field


def describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"
