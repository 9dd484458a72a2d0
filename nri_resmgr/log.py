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
import time
from collections.abc import Callable
from typing import TextIO

import attrs

from nri_resmgr.config.models import LogConfig
from nri_resmgr.config.notapplied import say_once
from nri_resmgr.errors import ConfigError

FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
PACKAGE = "nri_resmgr"

UPSTREAM_SOURCES = {
    "resource-manager": "nri_resmgr.resmgr",
    "nri-plugin": "nri_resmgr.nri",
    "policy": "nri_resmgr.policies",
    "cache": "nri_resmgr.policies.allocations",
    "agent": "nri_resmgr.agent",
    "config-manager": "nri_resmgr.agent",
    "sysfs": "nri_resmgr.sysfs",
    "instrumentation": "nri_resmgr.instrumentation",
    "metrics": "nri_resmgr.instrumentation",
    "balloons": "nri_resmgr.policies.balloons",
    "topology-aware": "nri_resmgr.policies.topology_aware",
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
        self._pending: list[logging.LogRecord | _Later] = []
        self._wake: Callable[[], None] | None = None
        self._thread = 0
        self._draining = False

    def defer(self, wake: Callable[[], None] | None) -> None:
        """Defer records of this thread, calling ``wake`` when the first one is kept
        (None: write at once again, after draining what is pending)."""
        global _DEFERRING
        self.drain()
        self._wake = wake
        self._thread = threading.get_ident()
        if wake is not None:
            _DEFERRING = self
        elif _DEFERRING is self:
            _DEFERRING = None

    def emit(self, record: logging.LogRecord) -> None:
        if self._wake is not None and not self._draining and threading.get_ident() == self._thread:
            self._keep(record)
            return
        if self._pending and threading.get_ident() == self._thread:
            self.drain()
        super().emit(record)

    def _keep(self, item: logging.LogRecord | _Later) -> None:
        if not self._pending and self._wake is not None:
            self._wake()
        self._pending.append(item)

    def drain(self) -> None:
        """Write the kept records, in order; a kept ``info_later`` call becomes its record
        here, and goes through its logger's handlers as ``Logger.info`` would have sent it."""
        if self._draining:
            return
        self._draining = True
        try:
            while self._pending:
                pending, self._pending = self._pending, []
                for item in pending:
                    if isinstance(item, logging.LogRecord):
                        super().emit(item)
                    else:
                        item.logger.handle(item.record())
        finally:
            self._draining = False

    def pending(self) -> int:
        return len(self._pending)

    def flush(self) -> None:
        if threading.get_ident() == self._thread:
            self.drain()
        super().flush()

    def close(self) -> None:
        global _DEFERRING
        self.flush()
        if _DEFERRING is self:
            _DEFERRING = None
        super().close()


class _Later:
    """A ``Logger.info`` call kept as it was made, to become a record at the drain."""

    __slots__ = ("args", "created_ns", "logger", "msg")

    def __init__(
        self, logger: logging.Logger, msg: str, args: tuple[object, ...], created_ns: int
    ) -> None:
        self.logger = logger
        self.msg = msg
        self.args = args
        self.created_ns = created_ns

    def record(self) -> logging.LogRecord:
        record = self.logger.makeRecord(
            self.logger.name, logging.INFO, "(unknown file)", 0, self.msg, self.args, None
        )
        # The time of the call, not of the drain (as a record kept whole would carry).
        record.created = self.created_ns / 1e9
        record.msecs = (self.created_ns // 1_000_000) % 1000
        record.relativeCreated = (self.created_ns - logging._startTime * 1e9) / 1e6  # type: ignore[attr-defined]
        return record


_DEFERRING: AfterReplyHandler | None = None
"""The handler deferring the trio thread's records, while one does."""


def info_later(logger: logging.Logger, msg: str, *args: object) -> None:
    """``logger.info(msg, *args)``; while the trio thread's records are deferred, even the
    record is made after the reply: building one (the caller lookup, the time fields, the
    ``LogRecord``) was most of a CreateContainer's log cost that ``defer`` left inside the
    request. The arguments must not change before the drain (strings, numbers, enums)."""
    handler = _DEFERRING
    if handler is None or threading.get_ident() != handler._thread:
        logger.info(msg, *args)
    elif logger.isEnabledFor(logging.INFO):
        handler._keep(_Later(logger, msg, args, time.time_ns()))


def after_reply_handler() -> AfterReplyHandler | None:
    """The root logger's ``AfterReplyHandler``, if ``setup_logging`` installed one."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, AfterReplyHandler):
            return handler
    return None


def not_applied(key: str) -> None:
    """Say once per process that a configured key is accepted but has no effect here."""
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
