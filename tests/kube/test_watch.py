"""Watch against scripted fake replies: list-then-watch, bookmarks, drops, 410, fatal errors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import attrs
import pytest
import trio

from nri_resmgr.backoff import Backoff
from nri_resmgr.kube import EventType, Forbidden, WatchEvent, decode
from nri_resmgr.kube.client import KubeClient
from nri_resmgr.kube.resources import CONFIG_MAPS
from tests.kube.conftest import ServeFake
from tests.kube.fakeserver import DropConnection, Reply, Request, event_line, status_reply

FAST = Backoff(initial=0.001, maximum=0.01)


def cm(name: str, rv: str, **data: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}, "data": data}


@attrs.define
class Script:
    """Lists answer from ``lists`` in turn; each watch connection plays the next ``watches``."""

    lists: list[dict[str, Any]]
    watches: list[list[bytes | str | Reply]]
    watch_requests: list[Request] = attrs.field(factory=list)

    async def handle(self, req: Request) -> Reply:
        if req.query.get("watch") != "true":
            return Reply(body=self.lists.pop(0))
        self.watch_requests.append(req)
        steps: list[bytes | str | Reply] = self.watches.pop(0) if self.watches else ["hang"]
        if steps and isinstance(steps[0], Reply):
            return steps[0]
        return Reply(stream=self._play(steps))

    async def _play(self, steps: list[bytes | str | Reply]) -> AsyncIterator[bytes]:
        import trio

        for step in steps:
            if step == "drop":
                raise DropConnection
            if step == "hang":
                await trio.sleep_forever()
            assert isinstance(step, bytes)
            yield step


def listing(rv: str, *items: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"resourceVersion": rv}, "items": list(items)}


async def collect(client: KubeClient, count: int, **kwargs: Any) -> list[WatchEvent]:
    """The first ``count`` events; the state by LIST unless ``watch_list=True`` is given (the
    scripts here answer LISTs; tests/kube/test_watch_list.py has the watch-list ones)."""
    kwargs.setdefault("watch_list", False)
    events: list[WatchEvent] = []
    async with client.watch(CONFIG_MAPS, "ns", backoff=FAST, **kwargs) as watch:
        async for event in watch:
            events.append(event)
            if len(events) == count:
                break
    return events


async def test_lists_first_then_streams_from_list_version(serve_fake: ServeFake) -> None:
    script = Script(
        lists=[listing("10", cm("a", "9"))],
        watches=[[event_line("ADDED", cm("b", "11")), event_line("DELETED", cm("a", "12"))]],
    )
    _, client = await serve_fake(script.handle)
    events = await collect(client, 3)
    assert [e.type for e in events] == [EventType.RESET, EventType.ADDED, EventType.DELETED]
    assert [o["metadata"]["name"] for o in events[0].objects] == ["a"]
    assert events[0].objects[0]["kind"] == "ConfigMap"
    assert events[2].object is not None and events[2].object["metadata"]["name"] == "a"
    query = script.watch_requests[0].query
    assert query["resourceVersion"] == "10"
    assert query["allowWatchBookmarks"] == "true"


async def test_bookmarks_advance_version_silently_and_reconnect_uses_it(
    serve_fake: ServeFake,
) -> None:
    bookmark = {"kind": "ConfigMap", "metadata": {"resourceVersion": "50"}}
    script = Script(
        lists=[],
        watches=[
            [event_line("MODIFIED", cm("a", "21")), event_line("BOOKMARK", bookmark), "drop"],
            [event_line("MODIFIED", cm("a", "51"))],
        ],
    )
    _, client = await serve_fake(script.handle)
    events = await collect(client, 2, resource_version="20")
    assert [(e.type, e.resource_version) for e in events] == [
        (EventType.MODIFIED, "21"),
        (EventType.MODIFIED, "51"),
    ]
    assert [r.query["resourceVersion"] for r in script.watch_requests] == ["20", "50"]


async def test_gone_relists_and_resets_with_fresh_state(serve_fake: ServeFake) -> None:
    expired = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
    script = Script(
        lists=[listing("100", cm("b", "99"))],
        watches=[
            [event_line("ADDED", cm("a", "6")), event_line("ERROR", expired)],
            [event_line("ADDED", cm("c", "101"))],
        ],
    )
    _, client = await serve_fake(script.handle)
    events = await collect(client, 3, resource_version="5")
    assert [e.type for e in events] == [EventType.ADDED, EventType.RESET, EventType.ADDED]
    assert [o["metadata"]["name"] for o in events[1].objects] == ["b"]
    assert events[1].resource_version == "100"
    assert [r.query["resourceVersion"] for r in script.watch_requests] == ["5", "100"]


async def test_gone_as_http_reply_also_relists(serve_fake: ServeFake) -> None:
    script = Script(
        lists=[listing("7")],
        watches=[[status_reply(410, "Gone", "too old")], [event_line("ADDED", cm("x", "8"))]],
    )
    _, client = await serve_fake(script.handle)
    events = await collect(client, 2, resource_version="1")
    assert [e.type for e in events] == [EventType.RESET, EventType.ADDED]
    assert events[0].objects == ()


async def test_server_errors_and_drops_reconnect_from_last_version(
    serve_fake: ServeFake,
) -> None:
    internal = {"kind": "Status", "code": 500, "reason": "InternalError", "message": "etcd"}
    script = Script(
        lists=[],
        watches=[
            [status_reply(503, "ServiceUnavailable")],
            [event_line("ADDED", cm("a", "31")), "drop"],
            [event_line("ERROR", internal)],
            [],  # a stream the server ends normally (timeoutSeconds) is resumed too
            [event_line("MODIFIED", cm("a", "32"))],
        ],
    )
    _, client = await serve_fake(script.handle)
    async with client.watch(CONFIG_MAPS, "ns", resource_version="30", backoff=FAST) as watch:
        events = []
        async for event in watch:
            events.append(event)
            if len(events) == 2:
                break
        assert watch.reconnects == 4
    assert [e.resource_version for e in events] == ["31", "32"]
    assert [r.query["resourceVersion"] for r in script.watch_requests] == [
        "30", "30", "31", "31", "31",
    ]  # fmt: skip


async def test_forbidden_is_raised_not_retried(serve_fake: ServeFake) -> None:
    script = Script(lists=[], watches=[[status_reply(403, "Forbidden", "no rbac")]])
    _, client = await serve_fake(script.handle)
    with pytest.raises(Forbidden, match="no rbac"):
        await collect(client, 1, resource_version="1")
    assert len(script.watch_requests) == 1


async def test_name_and_selectors_reach_list_and_watch(serve_fake: ServeFake) -> None:
    script = Script(lists=[listing("3")], watches=[[event_line("ADDED", cm("one", "4"))]])
    server, client = await serve_fake(script.handle)
    await collect(client, 2, name="one", field_selector="a=b", label_selector="l=v")
    list_query, watch_query = server.requests[0].query, server.requests[1].query
    for query in (list_query, watch_query):
        assert query["fieldSelector"] == "a=b,metadata.name=one"
        assert query["labelSelector"] == "l=v"
    assert "watch" not in list_query


@pytest.mark.parametrize(
    "bad",
    [
        b"this is not json\n",
        b'["a", "list"]\n',
        b'{"type": "ADDED", "object": "a string"}\n',
        b'{"type": "ERROR", "object": ["not", "a", "status"]}\n',
        b'{"type": 7, "object": {}}\n',
        b'{"type": "ADDED", "object": {"metadata": {"resourceVersion": 12}}}\n',
    ],
)
async def test_a_malformed_event_relists_instead_of_ending_the_watch(
    serve_fake: ServeFake, bad: bytes
) -> None:
    script = Script(
        lists=[listing("7", cm("a", "6"))],
        watches=[[event_line("ADDED", cm("a", "6")), bad], [event_line("ADDED", cm("b", "8"))]],
    )
    _, client = await serve_fake(script.handle)
    with trio.fail_after(10):  # a watch that misses the bad line would wait forever
        events = await collect(client, 3, resource_version="5")
    assert [e.type for e in events] == [EventType.ADDED, EventType.RESET, EventType.ADDED]
    assert [o["metadata"]["name"] for o in events[1].objects] == ["a"]
    # The relist's version skips the bad line instead of asking for it again.
    assert [r.query["resourceVersion"] for r in script.watch_requests] == ["5", "7"]


async def test_deeply_nested_json_in_an_event_is_cut_not_fatal(serve_fake: ServeFake) -> None:
    deep = '{"a": ' * 1500 + '"leaf"' + "}" * 1500  # deeper than Python's json can decode
    line = event_line("ADDED", cm("a", "6") | {"spec": {"control": {"rdt": {"options": "X"}}}})
    script = Script(lists=[], watches=[[line.replace(b'"X"', deep.encode())]])
    _, client = await serve_fake(script.handle)
    (event,) = await collect(client, 1, resource_version="5")
    assert event.object is not None
    assert event.object["metadata"]["name"] == "a"
    assert event.resource_version == "6"
    node, depth = event.object["spec"]["control"]["rdt"]["options"], 0
    while isinstance(node, dict):
        node, depth = node["a"], depth + 1
    assert node == decode.TOO_DEEP
    assert depth < decode.MAX_DEPTH


async def test_a_list_with_items_that_are_not_objects_is_retried(serve_fake: ServeFake) -> None:
    script = Script(
        lists=[
            {"metadata": {"resourceVersion": "3"}, "items": ["junk"]},
            listing("4", cm("a", "4")),
        ],
        watches=[],
    )
    _, client = await serve_fake(script.handle)
    with trio.fail_after(10):
        (reset,) = await collect(client, 1)
    assert [o["metadata"]["name"] for o in reset.objects] == ["a"]


async def test_forbidden_after_the_watch_was_served_is_retried(serve_fake: ServeFake) -> None:
    # An API server that has just started answers 403 until its RBAC caches are filled.
    script = Script(
        lists=[],
        watches=[
            [event_line("ADDED", cm("a", "2")), "drop"],
            [status_reply(403, "Forbidden", "RBAC: not ready")],
            [event_line("MODIFIED", cm("a", "3"))],
        ],
    )
    _, client = await serve_fake(script.handle)
    events = await collect(client, 2, resource_version="1")
    assert [e.resource_version for e in events] == ["2", "3"]
    assert [r.query["resourceVersion"] for r in script.watch_requests] == ["1", "2", "2"]
