"""The local-file configuration source (``--config-file``): re-read on change, no cluster.

trio has no portable file-change notification, so the file is polled; a change of
content (not just of mtime) triggers a reload. A file that fails to load or that the
policy refuses leaves the configuration in force untouched.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

import trio

from nri_resmgr.config.documents import load_file
from nri_resmgr.config.models import PolicyDocument
from nri_resmgr.errors import ConfigError
from nri_resmgr.resmgr.manager import ResourceManager

log = logging.getLogger(__name__)


def _digest(path: Path) -> bytes | None:
    try:
        return hashlib.sha256(path.read_bytes()).digest()
    except OSError:
        return None


class ConfigFileWatcher:
    """A daemon service that applies edits of the config file to the running manager."""

    name = "config-file"

    def __init__(
        self, manager: ResourceManager, path: str | Path, doc: PolicyDocument, interval: float = 1.0
    ) -> None:
        self.manager = manager
        self.path = Path(path)
        self.kind = doc.kind
        self.interval = interval
        self.applied = 0
        self.rejected = 0
        self.last_error: str | None = None
        self._seen = _digest(self.path)
        self._stopped = trio.Event()

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while not self._stopped.is_set():
            with trio.move_on_after(self.interval):
                await self._stopped.wait()
            if not self._stopped.is_set():
                await self.check()

    async def stop(self) -> None:
        self._stopped.set()

    async def check(self) -> None:
        digest = _digest(self.path)
        if digest is None or digest == self._seen:
            return
        self._seen = digest
        await self._reload()

    async def _reload(self) -> None:
        try:
            doc = load_file(self.path)
            if doc.kind != self.kind:
                raise ConfigError(
                    f"kind: the running policy is configured by {self.kind}, not {doc.kind}; "
                    "restart nri-resmgr to change the policy"
                )
            await self.manager.reconfigure(doc.spec)
        except ConfigError as exc:
            self.rejected += 1
            self.last_error = str(exc)
            for line in exc.errors:
                log.error("%s: configuration rejected, previous one stays: %s", self.path, line)
            return
        self.applied += 1
        self.last_error = None
        log.info("%s: configuration reloaded", self.path)
