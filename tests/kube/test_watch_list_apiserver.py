"""Watch-list against a real kube-apiserver, v1.35 and v1.37: the state and the changes on one
request, and no LIST at all, not even across an API server restart (requests counted on the
wire).

v1.37 sends a watch-list's reply in gzip, one member per flush (WatchListCompression, beta and
on from 1.37). Before the client read every member (nri_resmgr/kube/stream.py) the watch got
its state there and then nothing until the request ended (5 to 10 minutes): httpx's decoder
reads only the first member.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import attrs
import httpx
import pytest
import trio

from nri_resmgr.backoff import Backoff
from nri_resmgr.kube import EventType, KubeClient, WatchEvent
from nri_resmgr.kube.resources import CONFIG_MAPS, NAMESPACES
from tests.kube.apiserver import ApiServer

pytestmark = pytest.mark.integration


@attrs.define
class Counted(httpx.AsyncBaseTransport):
    """Counts the requests; keeps each watch's parameters and its reply's Content-Encoding."""

    inner: httpx.AsyncBaseTransport
    lists: int = 0
    watches: list[dict[str, str]] = attrs.field(factory=list)
    encodings: list[str | None] = attrs.field(factory=list)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if request.url.params.get("watch") == "true":
            self.watches.append(dict(request.url.params))
            self.encodings.append(response.headers.get("Content-Encoding"))
        elif request.method == "GET":
            self.lists += 1
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


COMPRESSED = {"apiserver": None, "apiserver_137": "gzip"}
"""Each session API server (tests/conftest.py) and how it encodes a watch-list's reply."""


@pytest.fixture(params=sorted(COMPRESSED))
def server(request: pytest.FixtureRequest) -> tuple[ApiServer, str | None]:
    return request.getfixturevalue(request.param), COMPRESSED[request.param]


@pytest.fixture
async def namespace(server: tuple[ApiServer, str | None]) -> AsyncIterator[str]:
    name = f"wl-{uuid.uuid4().hex[:8]}"
    async with KubeClient(server[0].config()) as admin:
        await admin.create(NAMESPACES, {"metadata": {"name": name}})
        yield name


async def next_event(events: trio.MemoryReceiveChannel[WatchEvent]) -> WatchEvent:
    with trio.fail_after(60):
        return await events.receive()


async def test_state_and_changes_come_on_one_watch_request_and_no_list(
    server: tuple[ApiServer, str | None], namespace: str
) -> None:
    apiserver, encoding = server
    config = apiserver.config()
    counted = Counted(httpx.AsyncHTTPTransport(verify=config.ssl_context()))
    async with KubeClient(config) as admin, KubeClient(config, transport=counted) as client:
        for name in ("a", "b"):
            await admin.create(CONFIG_MAPS, {"metadata": {"name": name}}, namespace)
        send, events = trio.open_memory_channel[WatchEvent](100)
        watch = client.watch(CONFIG_MAPS, namespace, backoff=Backoff(initial=0.1, maximum=1.0))
        async with trio.open_nursery() as nursery:

            async def pump() -> None:
                async with watch:
                    async for event in watch:
                        await send.send(event)

            nursery.start_soon(pump)
            reset = await next_event(events)
            assert reset.type is EventType.RESET
            assert sorted(o["metadata"]["name"] for o in reset.objects) == ["a", "b"]
            assert all(o["kind"] == "ConfigMap" for o in reset.objects)
            await admin.create(CONFIG_MAPS, {"metadata": {"name": "c"}}, namespace)
            added = await next_event(events)
            assert added.type is EventType.ADDED and added.object is not None
            assert added.object["metadata"]["name"] == "c"
            assert (counted.lists, len(counted.watches)) == (0, 1)
            assert counted.watches[0]["sendInitialEvents"] == "true"
            assert counted.encodings == [encoding]  # 1.37's reply came in gzip members

            async with apiserver.down():
                with trio.fail_after(60):
                    while watch.reconnects < 1:
                        await trio.sleep(0.05)
            await admin.create(CONFIG_MAPS, {"metadata": {"name": "d"}}, namespace)
            seen: set[str] = set()
            with trio.fail_after(60):
                while "d" not in seen:  # as ADDED, or inside a RESET after a 410
                    event = await next_event(events)
                    objects = event.objects if event.type is EventType.RESET else [event.object]
                    seen |= {str((o or {}).get("metadata", {}).get("name")) for o in objects}
            nursery.cancel_scope.cancel()
    assert counted.lists == 0
    # Every request after the first resumed from a version or asked for the state again.
    assert all("resourceVersion" in w or w.get("sendInitialEvents") for w in counted.watches)
