"""The prepared claims on disk: what Unprepare must release, also after a daemon restart.

One JSON file (``dra-claims.json`` in the state directory) holding every prepared claim.
Writes are atomic: a temporary file in the same directory, fsync, rename over the old one; a
reader sees the old content or the new, never a half-written file, also after a power loss
(the data is on disk before the rename). The directory is not fsynced: a rename lost to a
power loss leaves the previous, consistent record, and after a reboot kubelet prepares the
pods' claims again (unknown claims unprepare as success), so one fsync per write suffices.
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

from nri_resmgr.errors import ResmgrError
from nri_resmgr.resmgr.cpuset import CpuSet, CpuSetError

log = logging.getLogger(__name__)

STATE_FILE = "dra-claims.json"
FORMAT_VERSION = 1


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

    def __init__(self, directory: str | Path) -> None:
        self.path = Path(directory) / STATE_FILE
        self.records: dict[str, ClaimRecord] = {}
        self.broken: str | None = None
        """Why the state file cannot be used (then nothing is prepared or unprepared)."""

    def load(self) -> None:
        """Read the file (absent: no claims). A bad file marks the store broken."""
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
            write_atomically(self.path, json.dumps(body, indent=1).encode())
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


def describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"
