"""Watch-list against a real kube-apiserver v1.37.2 (``apiserver_137``, tests/conftest.py),
which compresses a watch-list's reply in gzip with one member per flush (WatchListCompression,
beta and on from 1.37): the changes after the initial state arrive on the same request, as
they do at 1.35 and 1.36.

Before the client decoded every member (nri_resmgr/kube/stream.py) the watch got its state and
then nothing until the request ended (5 to 10 minutes): httpx reads only the first member.
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
class Recorded(httpx.AsyncBaseTransport):
    """Counts the requests and keeps each watch reply's Content-Encoding."""

    inner: httpx.AsyncBaseTransport
    lists: int = 0
    watch_encodings: list[str | None] = attrs.field(factory=list)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if request.url.params.get("watch") == "true":
            self.watch_encodings.append(response.headers.get("Content-Encoding"))
        elif request.method == "GET":
            self.lists += 1
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.fixture
async def namespace(apiserver_137: ApiServer) -> AsyncIterator[str]:
    name = f"wlz-{uuid.uuid4().hex[:8]}"
    async with KubeClient(apiserver_137.config()) as admin:
        await admin.create(NAMESPACES, {"metadata": {"name": name}})
        yield name


async def next_event(events: trio.MemoryReceiveChannel[WatchEvent]) -> WatchEvent:
    with trio.fail_after(60):  # the request lasts 300 to 600 s: only a fix delivers in time
        return await events.receive()


async def test_changes_after_a_compressed_initial_state_arrive_on_the_same_watch(
    apiserver_137: ApiServer, namespace: str
) -> None:
    config = apiserver_137.config()
    recorded = Recorded(httpx.AsyncHTTPTransport(verify=config.ssl_context()))
    async with KubeClient(config) as admin, KubeClient(config, transport=recorded) as client:
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
            await admin.create(CONFIG_MAPS, {"metadata": {"name": "c"}}, namespace)
            added = await next_event(events)
            assert (added.type, (added.object or {})["metadata"]["name"]) == (EventType.ADDED, "c")
            await admin.delete(CONFIG_MAPS, "a", namespace)
            deleted = await next_event(events)
            assert deleted.type is EventType.DELETED
            assert (deleted.object or {})["metadata"]["name"] == "a"
            nursery.cancel_scope.cancel()
    # One request, no LIST, and its reply was the compressed kind that 1.37 sends.
    assert (recorded.lists, recorded.watch_encodings) == (0, ["gzip"])
    assert watch.reconnects == 0
