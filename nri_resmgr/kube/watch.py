"""A watch that survives disconnects, API server restarts and expired resourceVersions.

Event semantics:
- Without a starting ``resource_version`` the watch first lists and yields one ``RESET`` event
  holding every matching object, then streams changes from the list's resourceVersion
  (the list-then-watch an informer does).
- With a starting ``resource_version`` it streams changes after that version directly.
- ``ADDED``/``MODIFIED``/``DELETED`` carry one object each.
- Bookmarks are asked for and consumed silently: they only advance ``resource_version``.
- A dropped connection, a 5xx, a timeout or a normal end of the stream reconnects after a
  backoff from the last resourceVersion seen, so no change is missed.
- A line that is not a well-formed event (not JSON, no type, an object that is not an
  object) is logged, shortened, and treated like a 410: relist and RESET. JSON nested deeper
  than ``decode.MAX_DEPTH`` is cut there (see ``nri_resmgr.kube.decode``), not fatal.
- When the server answers 410 Gone (the version is older than it remembers, as after an
  etcd compaction or a long outage) the watch lists again and yields a new ``RESET`` with the
  full current state; the consumer must treat it as authoritative and drop whatever it holds
  that the RESET does not contain (that is how deletions during the gap show up). The relist
  waits for the backoff first, and the backoff is reset only by a watch that delivered an
  event, so a server that keeps answering 410 is asked less and less often.
- Errors that retrying cannot cure (Forbidden, NotFound, Invalid, BadRequest) are raised.
"""

from __future__ import annotations

import enum
import logging
import random
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import AbstractAsyncContextManager, aclosing
from types import NoneType, TracebackType
from typing import Protocol

import attrs

from nri_resmgr.backoff import Backoff
from nri_resmgr.errors import Recoverable
from nri_resmgr.kube import decode
from nri_resmgr.kube.errors import ApiError, BadResponse, Gone, error_from_status_object
from nri_resmgr.kube.objects import KubeObject, ObjectList
from nri_resmgr.kube.resources import ApiResource
from nri_resmgr.shorten import short_repr, shorten

log = logging.getLogger(__name__)


class Source(Protocol):
    """What a watch needs of the API client (``KubeClient`` is one): a full list, and a
    long GET read line by line."""

    async def list(
        self,
        resource: ApiResource,
        namespace: str | None = None,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
    ) -> ObjectList: ...

    def stream_lines(
        self, path: str, params: dict[str, str], *, read_timeout: float | None
    ) -> AbstractAsyncContextManager[AsyncIterator[str]]: ...


class MalformedEvent(BadResponse):
    """A watch line that is not a well-formed event: the stream is dropped and relisted.

    Relisting (after the backoff) gives the authoritative state and a version past the bad
    line, which resuming from the last good version would only be sent again; raising it
    would end the daemon on one bad line from the server (or a proxy in between).
    """


class EventType(enum.Enum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    RESET = "RESET"


@attrs.frozen
class WatchEvent:
    """One change; ``object`` is None for RESET, whose ``objects`` is the whole current state."""

    type: EventType
    object: KubeObject | None
    resource_version: str
    objects: tuple[KubeObject, ...] = ()


class Watch:
    """Iterate with ``async for``; ``async with`` around it closes the stream deterministically.

    ``timeout_seconds`` is the server-side watch duration (spread by up to 50% so many watchers
    do not reconnect together); the client read timeout is a margin above it, so a half-open
    connection is noticed instead of waited on forever.
    """

    def __init__(
        self,
        client: Source,
        resource: ApiResource,
        namespace: str | None,
        *,
        name: str | None = None,
        field_selector: str | None = None,
        label_selector: str | None = None,
        resource_version: str | None = None,
        backoff: Backoff | None = None,
        timeout_seconds: int = 300,
        read_margin: float = 30.0,
    ) -> None:
        self._client = client
        self._resource = resource
        self._namespace = namespace
        self._field_selector = _with_name(field_selector, name)
        self._label_selector = label_selector
        self.resource_version = resource_version
        self._backoff = backoff or Backoff(initial=0.2, maximum=30.0)
        self._timeout_seconds = timeout_seconds
        self._read_margin = read_margin
        self.reconnects = 0
        self.relists = 0
        self._gen: AsyncGenerator[WatchEvent, None] | None = None

    def __aiter__(self) -> AsyncGenerator[WatchEvent, None]:
        if self._gen is None:
            self._gen = self._events()
        return self._gen

    async def __aenter__(self) -> Watch:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._gen is not None:
            await self._gen.aclose()

    async def _events(self) -> AsyncGenerator[WatchEvent, None]:
        if self.resource_version is None:
            yield await self._relist()
        while True:
            try:
                async with aclosing(self._stream()) as stream:
                    async for event in stream:
                        # Only a watch that delivers proves the server healthy: a list that
                        # succeeds followed by a watch that fails at once must keep slowing.
                        self._backoff.reset()
                        yield event
            except (Gone, MalformedEvent) as exc:
                log.info("watch %s: %s; relisting from resourceVersion %s", self._what(),
                         exc, self.resource_version)  # fmt: skip
                # Back off before the relist: a server that answers 410 again at once would
                # otherwise see a LIST and a WATCH per round trip from every node.
                await self._backoff.sleep()
                yield await self._relist()
                continue
            except ApiError as exc:
                if not isinstance(exc, Recoverable):
                    raise
                log.warning("watch %s: %s; reconnecting from resourceVersion %s",
                            self._what(), exc, self.resource_version)  # fmt: skip
            self.reconnects += 1
            await self._backoff.sleep()

    async def _stream(self) -> AsyncGenerator[WatchEvent, None]:
        params = self._watch_params()
        path = self._resource.collection_path(self._namespace)
        read_timeout = float(params["timeoutSeconds"]) + self._read_margin
        async with self._client.stream_lines(path, params, read_timeout=read_timeout) as lines:
            async for line in lines:
                if line.strip():
                    event = self._parse(line)
                    if event is not None:
                        yield event

    def _parse(self, line: str) -> WatchEvent | None:
        try:
            raw = decode.loads(line)
        except ValueError as exc:
            raise self._malformed("is not JSON", line) from exc
        if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
            raise self._malformed("has no event type", line)
        kind, obj = raw["type"], raw.get("object")
        if not isinstance(obj, dict):
            raise self._malformed("has no object", line)
        if kind == "ERROR":
            raise error_from_status_object(obj)
        meta = obj.get("metadata")
        rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
        if not isinstance(rv, str | NoneType):
            raise self._malformed("has a resourceVersion that is not a string", line)
        if rv:
            self.resource_version = rv
        if kind == "BOOKMARK":
            return None
        try:
            event_type = EventType(kind)
        except ValueError:
            log.warning("watch %s: ignoring unknown event type %s", self._what(), short_repr(kind))
            return None
        return WatchEvent(event_type, _with_kind(obj, self._resource), rv or "")

    def _malformed(self, problem: str, line: str) -> MalformedEvent:
        message = f"watch {self._what()}: event {problem}: {shorten(line)}"
        return MalformedEvent(0, "MalformedEvent", message)

    async def _relist(self) -> WatchEvent:
        while True:
            try:
                listed = await self._client.list(
                    self._resource,
                    self._namespace,
                    field_selector=self._field_selector,
                    label_selector=self._label_selector,
                )
            except ApiError as exc:
                if not isinstance(exc, Recoverable):
                    raise
                log.warning("watch %s: list failed: %s; retrying", self._what(), exc)
                await self._backoff.sleep()
                continue
            self.relists += 1
            self.resource_version = listed.resource_version
            return WatchEvent(EventType.RESET, None, listed.resource_version, listed.items)

    def _watch_params(self) -> dict[str, str]:
        spread = random.uniform(1.0, 1.5)
        params = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(int(self._timeout_seconds * spread)),
        }
        if self.resource_version:
            params["resourceVersion"] = self.resource_version
        if self._field_selector:
            params["fieldSelector"] = self._field_selector
        if self._label_selector:
            params["labelSelector"] = self._label_selector
        return params

    def _what(self) -> str:
        where = f" in {self._namespace}" if self._namespace else ""
        sel = f" [{self._field_selector}]" if self._field_selector else ""
        return f"{self._resource.plural}{where}{sel}"


def _with_name(field_selector: str | None, name: str | None) -> str | None:
    if not name:
        return field_selector
    by_name = f"metadata.name={name}"
    return f"{field_selector},{by_name}" if field_selector else by_name


def _with_kind(obj: KubeObject, resource: ApiResource) -> KubeObject:
    if resource.kind and "kind" not in obj:
        return {"apiVersion": resource.api_version, "kind": resource.kind} | obj
    return obj
