"""A tiny stateful API server for fast agent tests, on top of tests/kube/fakeserver.py.

It keeps Nodes and config CRs in memory with one resourceVersion counter and an event
history, and answers what the agent sends: lists and watches of a collection or filtered by
``metadata.name``, watches that start with the current state (``sendInitialEvents``, ended
by the annotated bookmark), merge patches on the status subresource and Event creates
(kept in ``events``). Tests change objects
directly (``put``/``delete``) and can make requests fail (``fail_status``, ``forbid``).
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

import attrs
import trio

from nri_resmgr.kube.watch import INITIAL_EVENTS_END
from tests.kube.fakeserver import Reply, Request, event_line, status_reply

Obj = dict[str, Any]
NODES_PATH = "/api/v1/nodes"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


@attrs.define
class FakeKube:
    objects: dict[tuple[str, str], Obj] = attrs.field(factory=dict)  # (collection, name)
    history: list[tuple[int, str, str, Obj]] = attrs.field(factory=list)  # rv, type, coll, obj
    rv: int = 1
    uids: int = 0
    status_patches: list[tuple[str, Obj]] = attrs.field(factory=list)
    fail_status: int = 0  # the next N status patches answer 500
    forbidden: set[str] = attrs.field(factory=set)  # collections whose requests answer 403
    events: list[Obj] = attrs.field(factory=list)  # Events created
    max_status_entries: int | None = None  # the CRD's maxProperties of status.nodes
    watch_requests: list[dict[str, str]] = attrs.field(factory=list)
    _changed: trio.Event = attrs.field(factory=trio.Event)

    # -- the test's side ----------------------------------------------------------------------

    def put(self, collection: str, obj: Obj) -> Obj:
        """Creates or replaces ``obj`` (spec changes bump the generation, as the server does)."""
        name = obj["metadata"]["name"]
        old = self.objects.get((collection, name))
        new = copy.deepcopy(obj)
        meta = new["metadata"]
        if old is None:
            self.uids += 1
            meta["uid"], meta["generation"] = f"uid-{self.uids}", 1
        else:
            meta["uid"] = old["metadata"]["uid"]
            changed = old.get("spec") != new.get("spec")
            meta["generation"] = old["metadata"]["generation"] + (1 if changed else 0)
            new.setdefault("status", old.get("status"))
        self._store(collection, new, "ADDED" if old is None else "MODIFIED")
        return new

    def delete(self, collection: str, name: str) -> None:
        obj = self.objects.pop((collection, name))
        self._record(collection, obj, "DELETED")

    def send_raw(self, collection: str, name: str, line: bytes) -> None:
        """Streams ``line`` as is to watchers of ``name`` (a malformed event, say)."""
        self._record(collection, {"metadata": {"name": name}, "raw": line}, "RAW")

    def get(self, collection: str, name: str) -> Obj | None:
        return self.objects.get((collection, name))

    def node_status(self, collection: str, name: str, node: str) -> Obj | None:
        obj = self.get(collection, name) or {}
        entry: Obj | None = ((obj.get("status") or {}).get("nodes") or {}).get(node)
        return entry

    # -- the server's side --------------------------------------------------------------------

    async def handle(self, req: Request) -> Reply:
        collection, name, sub = _split(req.path)
        if collection in self.forbidden:
            return status_reply(403, "Forbidden", f"{collection} is forbidden")
        if req.method == "PATCH" and sub == "status":
            return self._patch_status(collection, name, req.json())
        if req.method == "POST" and collection.endswith("/events"):
            self.events.append(req.json())
            return Reply(201, req.json())
        if req.method == "GET" and not name:
            wanted = _name_selector(req.query.get("fieldSelector", ""))
            if req.query.get("watch") == "true":
                self.watch_requests.append({"collection": collection, **req.query})
                if req.query.get("sendInitialEvents") == "true":
                    return Reply(stream=self._initial_then_stream(collection, wanted))
                start = int(req.query.get("resourceVersion") or self.rv)
                return Reply(stream=self._stream(collection, wanted, start))
            items = self._matching(collection, wanted)
            return Reply(body={"metadata": {"resourceVersion": str(self.rv)}, "items": items})
        return status_reply(405, "MethodNotAllowed", f"{req.method} {req.path}")

    def _patch_status(self, collection: str, name: str, patch: Obj) -> Reply:
        self.status_patches.append((name, patch))
        if self.fail_status:
            self.fail_status -= 1
            return status_reply(500, "InternalError", "etcd is having a bad day")
        obj = self.objects.get((collection, name))
        if obj is None:
            return status_reply(404, "NotFound", f"{name} not found")
        updated = copy.deepcopy(obj)
        updated["status"] = merge_patch(obj.get("status"), patch.get("status"))
        entries = len((updated["status"] or {}).get("nodes") or {})
        if self.max_status_entries is not None and entries > self.max_status_entries:
            return status_reply(
                422,
                "Invalid",
                f"{name} is invalid: status.nodes: Too many: "
                f"{entries}: must have at most {self.max_status_entries} items",
            )
        self._store(collection, updated, "MODIFIED")
        return Reply(body=updated)

    def _matching(self, collection: str, name: str) -> list[Obj]:
        return [o for (c, n), o in self.objects.items() if c == collection and name in ("", n)]

    async def _initial_then_stream(self, collection: str, name: str) -> AsyncIterator[bytes]:
        start = self.rv
        for obj in self._matching(collection, name):
            yield event_line("ADDED", obj)
        meta = {"resourceVersion": str(start), "annotations": {INITIAL_EVENTS_END: "true"}}
        yield event_line("BOOKMARK", {"metadata": meta})
        async for line in self._stream(collection, name, start):
            yield line

    async def _stream(self, collection: str, name: str, start: int) -> AsyncIterator[bytes]:
        seen = start
        while True:
            for rv, kind, coll, obj in self.history:
                if rv > seen and coll == collection and name in ("", obj["metadata"]["name"]):
                    yield obj["raw"] if kind == "RAW" else event_line(kind, obj)
            seen = self.rv
            changed = self._changed
            await changed.wait()

    def _store(self, collection: str, obj: Obj, kind: str) -> None:
        self.objects[(collection, obj["metadata"]["name"])] = obj
        self._record(collection, obj, kind)

    def _record(self, collection: str, obj: Obj, kind: str) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.history.append((self.rv, kind, collection, copy.deepcopy(obj)))
        self._changed.set()
        self._changed = trio.Event()


def _split(path: str) -> tuple[str, str, str]:
    """(collection path, object name, subresource) of a request path."""
    parts = path.rstrip("/").split("/")
    depth = 4 if path.startswith("/api/") else 5  # /api/v1/nodes vs /apis/g/v/ns/N/plural
    if "/namespaces/" in path:
        depth += 2
    collection = "/".join(parts[:depth])
    rest = parts[depth:]
    return collection, rest[0] if rest else "", rest[1] if len(rest) > 1 else ""


def _name_selector(selector: str) -> str:
    for term in selector.split(","):
        key, _, value = term.partition("=")
        if key == "metadata.name":
            return value
    return ""
