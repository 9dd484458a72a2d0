"""A watch that survives disconnects, API server restarts and expired resourceVersions.

Event semantics:
- Without a starting ``resource_version`` the watch first yields one ``RESET`` event holding
  every matching object, then streams the changes after it. The state comes on the watch
  itself (``sendInitialEvents``, Kubernetes' watch-list: one request, served from the API
  server's watch cache, ended by a bookmark); a server that refuses that (before 1.27, or
  with the WatchList feature off) is asked with a LIST instead, and the watch streams from
  the list's resourceVersion (the list-then-watch an informer does). From 1.37 that reply
  comes in gzip of one member per flush, which the client decodes whole (``kube.stream``).
- With a starting ``resource_version`` it streams changes after that version directly.
- ``ADDED``/``MODIFIED``/``DELETED`` carry one object each.
- Bookmarks are asked for and consumed silently: they only advance ``resource_version``.
- A dropped connection, a 5xx, a timeout or a normal end of the stream reconnects after a
  backoff from the last resourceVersion seen, so no change is missed.
- A line that is not a well-formed event (not JSON, no type, an object that is not an
  object) is logged, shortened, and treated like a 410: relist and RESET. JSON nested deeper
  than ``decode.MAX_DEPTH`` is cut there (see ``nri_resmgr.kube.decode``), not fatal.
- When the server answers 410 Gone (the version is older than it remembers, as after an
  etcd compaction or a long outage) the watch asks for the state again (as at the start)
  and yields a new ``RESET`` with the full current state; the consumer must treat it as
  authoritative and drop whatever it holds that the RESET does not contain (that is how
  deletions during the gap show up). The relist waits for the backoff first, and the
  backoff is reset only by a watch that delivered an event, so a server that keeps
  answering 410 is asked less and less often.
- Errors that retrying cannot cure (Forbidden, NotFound, Invalid, BadRequest) are raised,
  except a 403 after the watch was once served: an API server that has just started answers
  403 until its RBAC caches are filled (seen in tests/fleet at every restart), and a fleet
  of agents ending together on that would all restart at once. That 403 is logged and
  retried with the backoff; one at the first request still names a missing permission.
- Each watch request asks the server to end it after ``timeout_seconds`` to twice that (spread
  as client-go's reflectors spread theirs), and is then resumed from the last version: a
  fleet's watches do not end together.
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
from nri_resmgr.kube.errors import (
    ApiError,
    BadRequest,
    BadResponse,
    Forbidden,
    Gone,
    Invalid,
    error_from_status_object,
)
from nri_resmgr.kube.objects import KubeObject, ObjectList
from nri_resmgr.kube.resources import ApiResource
from nri_resmgr.shorten import short_repr, shorten

log = logging.getLogger(__name__)

INITIAL_EVENTS_END = "k8s.io/initial-events-end"
"""The annotation of the bookmark that ends a watch's initial events (watch-list)."""


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

    def __init__(self, message: str) -> None:
        super().__init__(0, "MalformedEvent", message)


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

    ``timeout_seconds`` is the server-side watch duration (spread up to twice that so many
    watchers do not reconnect together); the client read timeout is a margin above it, so a
    half-open connection is noticed instead of waited on forever. ``watch_list`` False asks
    for the state with a LIST even of a server that could send it on the watch.
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
        watch_list: bool = True,
    ) -> None:
        self._client = client
        self._resource = resource
        self._namespace = namespace
        self._field_selector = _with_name(field_selector, name)
        self._label_selector = label_selector
        self.resource_version = resource_version
        self._backoff = backoff or default_backoff()
        self._timeout_seconds = timeout_seconds
        self._read_margin = read_margin
        self.watch_list = watch_list
        self.served = False
        """Whether the server ever answered a request of this watch (403 is then retried)."""
        self._opened = False  # the current request was answered with a stream
        self.reconnects = 0
        self.relists = 0
        """States received: lists, and initial events on a watch."""
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
        need_state = self.resource_version is None
        list_next = False  # a watch-list was cut before its state was complete
        while True:
            self._opened = False
            try:
                if need_state and (list_next or not self.watch_list):
                    yield await self._relist()
                    need_state = list_next = False
                async with aclosing(self._stream(initial=need_state)) as stream:
                    async for event in stream:
                        # Only a watch that delivers proves the server healthy: a list that
                        # succeeds followed by a watch that fails at once must keep slowing.
                        self._backoff.reset()
                        need_state = need_state and event.type is not EventType.RESET
                        yield event
            except (Gone, MalformedEvent) as exc:
                log.info("watch %s: %s; asking for the state again (resourceVersion was %s)",
                         self._what(), exc, self.resource_version)  # fmt: skip
                # Back off before the relist: a server that answers 410 again at once would
                # otherwise see a LIST and a WATCH per round trip from every node.
                need_state = True
                await self._backoff.sleep()
                continue
            except (BadRequest, Invalid) as exc:
                if not (need_state and self.watch_list):
                    raise
                # A server without watch-list refuses its parameters; a LIST does the same.
                log.info("watch %s: the server does not send the state on a watch (%s); "
                         "listing instead", self._what(), exc)  # fmt: skip
                self.watch_list = False
                continue
            except ApiError as exc:
                if not self._retried(exc):
                    raise
                log.warning("watch %s: %s; reconnecting from resourceVersion %s",
                            self._what(), exc, self.resource_version)  # fmt: skip
            # A watch-list served but cut before its state was complete: asked again it may
            # be cut again, so the state comes from a LIST once (client-go's reflector does
            # the same: making progress is better than asking for ever). A request refused
            # before it was served (429 while a restarted server warms up) asks again as it was.
            list_next = need_state and self.watch_list and self._opened
            self.reconnects += 1
            await self._backoff.sleep()

    def _retried(self, exc: ApiError) -> bool:
        return isinstance(exc, Recoverable) or (isinstance(exc, Forbidden) and self.served)

    async def _stream(self, *, initial: bool) -> AsyncGenerator[WatchEvent, None]:
        """The events of one watch request; with ``initial``, first the state as one RESET."""
        params = self._watch_params(initial=initial)
        path = self._resource.collection_path(self._namespace)
        read_timeout = float(params["timeoutSeconds"]) + self._read_margin
        state: dict[tuple[str, str], KubeObject] | None = {} if initial else None
        async with self._client.stream_lines(path, params, read_timeout=read_timeout) as lines:
            self.served = self._opened = True
            async for line in lines:
                if not line.strip():
                    continue
                event = self._parse(line)
                if state is None:
                    if event is not None:
                        yield event
                elif event is not None:
                    _apply(state, event)
                elif _ends_initial_events(line):
                    self.relists += 1
                    yield WatchEvent(EventType.RESET, None, self.resource_version or "",
                                     tuple(state.values()))  # fmt: skip
                    state = None

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
        return MalformedEvent(message)

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
                if not self._retried(exc):
                    raise
                log.warning("watch %s: list failed: %s; retrying", self._what(), exc)
                await self._backoff.sleep()
                continue
            self.served = True
            self.relists += 1
            self.resource_version = listed.resource_version
            return WatchEvent(EventType.RESET, None, listed.resource_version, listed.items)

    def _watch_params(self, *, initial: bool = False) -> dict[str, str]:
        spread = random.uniform(1.0, 2.0)
        params = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(int(self._timeout_seconds * spread)),
        }
        if initial:
            # The current state (a consistent read, no resourceVersion), then its changes.
            params["sendInitialEvents"] = "true"
            params["resourceVersionMatch"] = "NotOlderThan"
        elif self.resource_version:
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


def default_backoff() -> Backoff:
    """Reconnects spread widely (uniform over 0 to 2x the delay): after an API server restart
    a fleet's watches come back over the whole backoff window, not in a few bunches."""
    return Backoff(initial=0.2, maximum=30.0, jitter=1.0)


def _apply(state: dict[tuple[str, str], KubeObject], event: WatchEvent) -> None:
    """An initial event into the state being gathered (they are ADDED; others are honoured)."""
    obj = event.object or {}
    meta = obj.get("metadata") or {}
    key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
    if event.type is EventType.DELETED:
        state.pop(key, None)
    else:
        state[key] = obj


def _ends_initial_events(line: str) -> bool:
    """Whether ``line`` (which ``_parse`` took as no event) is the bookmark ending the initial
    events. Read again only when the annotation's name is in it: bookmarks are rare."""
    if INITIAL_EVENTS_END not in line:
        return False
    raw = decode.loads(line)
    obj = raw.get("object") if isinstance(raw, dict) else None
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    return (
        raw.get("type") == "BOOKMARK"
        and isinstance(annotations, dict)
        and annotations.get(INITIAL_EVENTS_END) == "true"
    )


def _with_name(field_selector: str | None, name: str | None) -> str | None:
    if not name:
        return field_selector
    by_name = f"metadata.name={name}"
    return f"{field_selector},{by_name}" if field_selector else by_name


def _with_kind(obj: KubeObject, resource: ApiResource) -> KubeObject:
    if resource.kind and "kind" not in obj:
        return {"apiVersion": resource.api_version, "kind": resource.kind} | obj
    return obj
