"""The state on the watch itself (watch-list), against scripted fake replies: one request
instead of a LIST and a WATCH, a cut-off start asked again, a server that refuses it."""

from __future__ import annotations

from typing import Any

from nri_resmgr.kube import EventType, WatchEvent
from nri_resmgr.kube.client import KubeClient
from nri_resmgr.kube.watch import INITIAL_EVENTS_END
from tests.kube.conftest import ServeFake
from tests.kube.fakeserver import status_reply
from tests.kube.test_watch import Script, cm, event_line, listing
from tests.kube.test_watch import collect as collect_events


def end_of_initial_events(rv: str) -> bytes:
    meta = {"resourceVersion": rv, "annotations": {INITIAL_EVENTS_END: "true"}}
    return event_line("BOOKMARK", {"kind": "ConfigMap", "metadata": meta})


async def collect(client: KubeClient, count: int, **kwargs: Any) -> list[WatchEvent]:
    return await collect_events(client, count, watch_list=True, **kwargs)


async def test_the_state_comes_on_the_watch_in_one_request(serve_fake: ServeFake) -> None:
    script = Script(
        lists=[],
        watches=[[event_line("ADDED", cm("a", "7")), event_line("ADDED", cm("b", "9")),
                  end_of_initial_events("12"), event_line("MODIFIED", cm("a", "13"))]],
    )  # fmt: skip
    server, client = await serve_fake(script.handle)
    reset, modified = await collect(client, 2)

    assert reset.type is EventType.RESET
    assert [o["metadata"]["name"] for o in reset.objects] == ["a", "b"]
    assert reset.objects[0]["kind"] == "ConfigMap"
    assert reset.resource_version == "12"
    assert (modified.type, modified.resource_version) == (EventType.MODIFIED, "13")
    [request] = server.requests  # no LIST
    assert request.query["sendInitialEvents"] == "true"
    assert request.query["resourceVersionMatch"] == "NotOlderThan"
    assert request.query["allowWatchBookmarks"] == "true"
    assert "resourceVersion" not in request.query  # a consistent read of the current state


async def test_a_bookmark_without_the_annotation_does_not_end_the_initial_events(
    serve_fake: ServeFake,
) -> None:
    plain = event_line("BOOKMARK", {"kind": "ConfigMap", "metadata": {"resourceVersion": "8"}})
    script = Script(
        lists=[],
        watches=[[event_line("ADDED", cm("a", "7")), plain, event_line("ADDED", cm("b", "9")),
                  end_of_initial_events("10")]],
    )  # fmt: skip
    _, client = await serve_fake(script.handle)
    [reset] = await collect(client, 1)
    assert [o["metadata"]["name"] for o in reset.objects] == ["a", "b"]


async def test_a_watch_cut_off_before_the_state_ends_gets_the_state_from_one_list(
    serve_fake: ServeFake,
) -> None:
    """A watch-list served but cut before its end bookmark may be cut again if asked again
    (a server that cuts every stream would be asked for ever): the state comes from a LIST
    once, as client-go's reflector falls back, and the watch resumes from the list's version;
    nothing of the cut try is kept."""
    script = Script(
        lists=[listing("11", cm("b", "9"))],
        watches=[
            [event_line("ADDED", cm("a", "7")), "drop"],
            [event_line("ADDED", cm("c", "12"))],
        ],
    )
    server, client = await serve_fake(script.handle)
    reset, added = await collect(client, 2)
    assert [o["metadata"]["name"] for o in reset.objects] == ["b"]  # nothing of the first try
    assert added.object is not None and added.object["metadata"]["name"] == "c"
    kinds = [("WATCH" if r.query.get("watch") else "LIST", r.query.get("sendInitialEvents"),
              r.query.get("resourceVersion")) for r in server.requests]  # fmt: skip
    assert kinds == [("WATCH", "true", None), ("LIST", None, None), ("WATCH", None, "11")]


async def test_a_watch_list_refused_before_it_is_served_asks_again_on_the_watch(
    serve_fake: ServeFake,
) -> None:
    """A 429 (a restarted API server warming up) is no cut stream: no LIST after it."""
    busy = status_reply(429, "TooManyRequests", "storage is (re)initializing")
    script = Script(lists=[], watches=[[busy], [end_of_initial_events("5")]])
    server, client = await serve_fake(script.handle)
    [reset] = await collect(client, 1)
    assert reset.type is EventType.RESET
    assert [r.query.get("sendInitialEvents") for r in server.requests] == ["true", "true"]


async def test_after_the_state_a_reconnect_resumes_from_the_last_version(
    serve_fake: ServeFake,
) -> None:
    script = Script(
        lists=[],
        watches=[
            [end_of_initial_events("11"), event_line("ADDED", cm("c", "12")), "drop"],
            [event_line("DELETED", cm("c", "13"))],
        ],
    )
    server, client = await serve_fake(script.handle)
    events = await collect(client, 3)
    assert [e.type for e in events] == [EventType.RESET, EventType.ADDED, EventType.DELETED]
    second = server.requests[1].query
    assert second["resourceVersion"] == "12"
    assert "sendInitialEvents" not in second


async def test_gone_asks_for_the_state_on_a_watch_not_a_list(serve_fake: ServeFake) -> None:
    script = Script(
        lists=[],
        watches=[
            [status_reply(410, "Expired", "too old")],
            [event_line("ADDED", cm("a", "40")), end_of_initial_events("41")],
        ],
    )
    server, client = await serve_fake(script.handle)
    [reset] = await collect(client, 1, resource_version="5")
    assert reset.type is EventType.RESET and reset.resource_version == "41"
    assert [r.query.get("watch") for r in server.requests] == ["true", "true"]
    assert server.requests[0].query["resourceVersion"] == "5"
    assert server.requests[1].query["sendInitialEvents"] == "true"


async def test_a_server_that_refuses_the_state_on_a_watch_is_listed_from_then_on(
    serve_fake: ServeFake,
) -> None:
    refusal = status_reply(
        422, "Invalid",
        "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: "
        "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
    )  # fmt: skip
    expired = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
    script = Script(
        lists=[listing("20", cm("a", "19")), listing("30", cm("b", "29"))],
        watches=[[refusal], [event_line("ERROR", expired)], [event_line("ADDED", cm("c", "31"))]],
    )
    server, client = await serve_fake(script.handle)
    events = await collect(client, 3)
    assert [e.type for e in events] == [EventType.RESET, EventType.RESET, EventType.ADDED]
    assert [o["metadata"]["name"] for o in events[1].objects] == ["b"]
    kinds = [("WATCH" if r.query.get("watch") else "LIST", r.query.get("resourceVersion"))
             for r in server.requests]  # fmt: skip
    assert kinds == [("WATCH", None), ("LIST", None), ("WATCH", "20"), ("LIST", None),
                     ("WATCH", "30")]  # fmt: skip


async def test_watches_end_after_one_to_two_timeouts(serve_fake: ServeFake) -> None:
    script = Script(lists=[], watches=[[end_of_initial_events("2")]])
    server, client = await serve_fake(script.handle)
    await collect(client, 1, timeout_seconds=100)
    assert 100 <= int(server.requests[0].query["timeoutSeconds"]) <= 200
