"""Logging set-up, and the ``log`` section of the configuration.

``--log-level`` sets the base level. The ``log`` section then applies as nri-plugins'
``pkg/log`` does, where Python logging has an equivalent:

- ``debug``: entries ``source[:on|off]`` (comma-separated allowed); ``all`` or ``*`` is every
  logger. A source is one of our logger names (``nri_resmgr.dra``), its short form (``dra``,
  ``topology-aware``) or an upstream source name from ``UPSTREAM_SOURCES``.
- ``source``: prefix every message with its logger's name (off: no prefix).
- ``klog.skip_headers``: leave out the time and level header (as klog does).
- ``klog.v``: klog verbosity has no Python equivalent: declared not applied.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from typing import TextIO

import attrs

from nri_resmgr.config.models import LogConfig
from nri_resmgr.errors import ConfigError

FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
PACKAGE = "nri_resmgr"

UPSTREAM_SOURCES = {
    "resource-manager": "nri_resmgr.resmgr",
    "nri-plugin": "nri_resmgr.nri",
    "policy": "nri_resmgr.resmgr.policies",
    "cache": "nri_resmgr.resmgr.cache",
    "agent": "nri_resmgr.config",
    "config-manager": "nri_resmgr.config",
    "sysfs": "nri_resmgr.sysfs",
    "instrumentation": "nri_resmgr.instrumentation",
    "metrics": "nri_resmgr.instrumentation",
    "balloons": "nri_resmgr.resmgr.policies.balloons",
    "topology-aware": "nri_resmgr.resmgr.policies.topology_aware",
}
"""nri-plugins logger sources and the logger of ours that does the same job."""

_NOISY = ("grpclib", "asyncio", "hpack", "httpx", "httpcore", "hypercorn")
_base_level = logging.INFO
_debugged: list[str] = []


def setup_logging(level: str) -> None:
    global _base_level
    # FORMAT names none of these record fields: not gathering them makes each line (one per
    # container event at info level) cheaper, as the logging manual's Optimization section
    # describes. (_srcfile None skips the stack walk that finds the caller's file and line.)
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging._srcfile = None
    handler = AfterReplyHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    _base_level = root.level
    # grpclib and the asyncio bridge are chatty at debug; their warnings still show.
    for noisy in _NOISY:
        logging.getLogger(noisy).setLevel(max(logging.INFO, root.level))


class AfterReplyHandler(logging.StreamHandler[TextIO]):
    """A stream handler that, once ``defer`` is on, keeps the records logged in the trio
    thread and writes them when ``drain`` is called, instead of inside ``emit``.

    The daemon drains from a task that runs once the current request has been answered
    (``nri_resmgr.nri.afterreply``): formatting and writing the one line per container event
    (40-70 µs per CreateContainer in ``tests/bench/tail.py``, most of it cold-cache time)
    then no longer delays the reply. Records keep their own timestamps and order; a record
    from another thread, or any record while deferring is off, is written at once (after
    what is pending, when logged from the trio thread). ``flush`` and ``close`` drain.
    Formatting is deferred too, so an argument mutated before the drain would show its
    new value; the drain comes at the next scheduler turn, before any other request."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self._pending: list[logging.LogRecord] = []
        self._wake: Callable[[], None] | None = None
        self._thread = 0

    def defer(self, wake: Callable[[], None] | None) -> None:
        """Defer records of this thread, calling ``wake`` when the first one is kept
        (None: write at once again, after draining what is pending)."""
        self.drain()
        self._wake = wake
        self._thread = threading.get_ident()

    def emit(self, record: logging.LogRecord) -> None:
        if self._wake is not None and threading.get_ident() == self._thread:
            if not self._pending:
                self._wake()
            self._pending.append(record)
            return
        if self._pending and threading.get_ident() == self._thread:
            self.drain()
        super().emit(record)

    def drain(self) -> None:
        """Write the kept records, in order."""
        while self._pending:
            pending, self._pending = self._pending, []
            for record in pending:
                super().emit(record)

    def pending(self) -> int:
        return len(self._pending)

    def flush(self) -> None:
        if threading.get_ident() == self._thread:
            self.drain()
        super().flush()

    def close(self) -> None:
        self.flush()
        super().close()


def after_reply_handler() -> AfterReplyHandler | None:
    """The root logger's ``AfterReplyHandler``, if ``setup_logging`` installed one."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, AfterReplyHandler):
            return handler
    return None


def not_applied(key: str) -> None:
    """Say once per process that a configured key is accepted but has no effect here."""
    from nri_resmgr.config.notapplied import say_once

    say_once(key)


@attrs.frozen
class DebugSpec:
    """The loggers ``log.debug`` switches; ``everything`` is ``all``/``*``."""

    on: tuple[str, ...] = ()
    off: tuple[str, ...] = ()
    everything: bool = False


def parse_debug(entries: tuple[str, ...]) -> DebugSpec:
    on: list[str] = []
    off: list[str] = []
    everything = False
    for entry in entries:
        for raw in entry.split(","):
            item = raw.strip()
            if not item:
                continue
            source, _, state = item.partition(":")
            state = state or "on"
            if state not in ("on", "off"):
                raise ConfigError(f"spec.log.debug: {item[:80]!r}: state must be on or off")
            if source in ("all", "*"):
                everything = state == "on"
                continue
            (on if state == "on" else off).append(_logger_name(source))
    return DebugSpec(tuple(on), tuple(off), everything)


def _logger_name(source: str) -> str:
    if source in UPSTREAM_SOURCES:
        return UPSTREAM_SOURCES[source]
    if source == PACKAGE or source.startswith(PACKAGE + "."):
        return source
    return f"{PACKAGE}.{source.replace('-', '_')}"


def configure(cfg: LogConfig) -> None:
    """Apply a ``log`` section (at start and on every applied reconfiguration).

    Levels are set on the named loggers only: a record is filtered by its own logger's level
    and then reaches the root's handler whatever the root's level, so the base level
    (``--log-level``) stays on the root and everything not named keeps it.
    """
    debug = parse_debug(cfg.debug)
    for name in _debugged:
        logging.getLogger(name).setLevel(logging.NOTSET)
    _debugged.clear()
    levels = {PACKAGE: logging.DEBUG} if debug.everything else {}
    levels |= {name: logging.DEBUG for name in debug.on}
    levels |= {name: max(logging.INFO, _base_level) for name in debug.off}
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
        _debugged.append(name)
    _set_format(source=cfg.source, headers=not cfg.klog.skip_headers)
    if cfg.klog.v is not None:
        not_applied("spec.log.klog.v")


def _set_format(*, source: bool, headers: bool) -> None:
    fmt = "%(asctime)s %(levelname)-7s " if headers else ""
    fmt += "%(name)s: %(message)s" if source else "%(message)s"
    for handler in logging.getLogger().handlers:
        handler.setFormatter(logging.Formatter(fmt))


__all__ = [
    "FORMAT",
    "UPSTREAM_SOURCES",
    "AfterReplyHandler",
    "after_reply_handler",
    "configure",
    "not_applied",
    "parse_debug",
    "setup_logging",
]
