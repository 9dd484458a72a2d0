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

The file is not trusted: it is read only if it is a regular file (not a symlink) of at most
``MAX_STATE_BYTES``, nested no deeper than the format (``MAX_DEPTH``), with every field of
the type the format gives it and every claim keyed by a Kubernetes UID. No path is taken
from it: the CDI spec of a claim is found from its UID (``cdiFile``, written by earlier
versions, is ignored). Writes go through ``dra.files`` (random temporary names, no
symlinks followed, checked directories).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs

from nri_resmgr.cpuset import CpuSet, CpuSetError
from nri_resmgr.dra.kubeletplugin.claims import uid_problem
from nri_resmgr.dra.kubeletplugin.files import read_file, write_file
from nri_resmgr.errors import ResmgrError

log = logging.getLogger(__name__)

STATE_FILE = "dra-claims.json"
FORMAT_VERSION = 1
MEMORY_FILESYSTEMS = frozenset({"tmpfs", "ramfs"})
"""Filesystems whose data dies with the machine: fsync has nothing to make durable."""
MOUNTINFO = Path("/proc/self/mountinfo")
NOT_FSYNCED = "tmpfs, not fsynced: kubelet prepares the claims again after a reboot"
MAX_STATE_BYTES = 16 << 20
"""A record is ~250 bytes: room for tens of thousands of claims, far more than a node has."""
MAX_DEPTH = 5
"""The format's nesting: document, claims, a claim, its results, a result."""


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
    key: str = attrs.field(default="", repr=False)
    """The claim's key (``cdi.new_claim_key``); empty in a record of a version before keys
    (``CpuDriver.restore`` gives it one)."""
    grouped: bool = False
    """Prepared from grouped devices (its CPUs picked in the groups), not per-CPU ones."""

    def to_json(self) -> dict[str, Any]:
        keyed = {"key": self.key} if self.key else {}
        return {
            "namespace": self.namespace,
            "name": self.name,
            "cpus": str(self.cpus),
            **keyed,
            **({"grouped": True} if self.grouped else {}),
            "results": [{"request": r.request, "device": r.device} for r in self.results],
        }

    @classmethod
    def from_json(cls, uid: str, raw: object) -> ClaimRecord:
        problem = uid_problem(uid)
        if problem:
            raise ValueError(f"claim {problem}")
        where = f"claims.{uid}"
        claim = _object(raw, where)
        results = claim["results"]
        if not isinstance(results, list):
            raise TypeError(f"{where}.results is not a list")
        return cls(
            uid=uid,
            namespace=_string(claim, "namespace", where),
            name=_string(claim, "name", where),
            cpus=CpuSet.parse(_string(claim, "cpus", where)),
            results=tuple(
                PreparedResult(
                    _string(_object(r, f"{where}.results[{i}]"), "request", where),
                    _string(_object(r, f"{where}.results[{i}]"), "device", where),
                )
                for i, r in enumerate(results)
            ),
            key=_key(claim, where),
            grouped=_flag(claim, "grouped", where),
        )


_KEY = re.compile(r"[0-9a-f]{32}")


def _key(claim: Mapping[str, Any], where: str) -> str:
    """The claim's key; a record written before keys has none (empty)."""
    if "key" not in claim:
        return ""
    key = _string(claim, "key", where)
    if not _KEY.fullmatch(key):
        raise ValueError(f"{where}.key is not 32 hex digits")
    return key


def _flag(claim: Mapping[str, Any], key: str, where: str) -> bool:
    value = claim.get(key, False)
    if not isinstance(value, bool):
        raise TypeError(f"{where}.{key} is not a boolean")
    return value


def _object(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"{where} is not an object")
    return value


def _string(value: Mapping[str, Any], key: str, where: str) -> str:
    text = value[key]
    if not isinstance(text, str):
        raise TypeError(f"{where}.{key} is not a string")
    return text


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
            data = read_file(self.path.parent, self.path.name, MAX_STATE_BYTES)
        except OSError as e:
            self._break(f"cannot read DRA state file {self.path}: {e.strerror or e}")
            return
        if data is None:
            self.records = {}
            return
        try:
            self.records = parse(data.decode())
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
    check_depth(text, MAX_DEPTH)
    body = json.loads(text)
    if not isinstance(body, dict) or body.get("version") != FORMAT_VERSION:
        raise ValueError(f"not a version {FORMAT_VERSION} claim state document")
    claims = body["claims"]
    if not isinstance(claims, dict):
        raise TypeError("claims is not an object")
    return {uid: ClaimRecord.from_json(uid, raw) for uid, raw in claims.items()}


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(r"[\[\]{}]")


def check_depth(text: str, limit: int) -> None:
    """Refuses JSON nested deeper than ``limit`` before the decoder (which recurses) sees it;
    brackets inside strings do not count."""
    depth = 0
    for bracket in _BRACKETS.findall(_JSON_STRING.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        if depth > limit:
            raise ValueError(f"nested deeper than the format's {limit} levels")


def write_atomically(path: Path, data: bytes, mode: int = 0o600, *, durable: bool = True) -> None:
    """``path`` holds ``data`` or what it held before, whatever fails when (``dra.files``)."""
    write_file(path.parent, path.name, data, mode, durable=durable)


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
