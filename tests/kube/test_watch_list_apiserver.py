"""Watch-list against a real kube-apiserver v1.35: the state and the changes on one request,
and no LIST at all, not even across an API server restart (requests counted on the wire)."""

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
    inner: httpx.AsyncBaseTransport
    lists: int = 0
    watches: list[dict[str, str]] = attrs.field(factory=list)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.params.get("watch") == "true":
            self.watches.append(dict(request.url.params))
        elif request.method == "GET":
            self.lists += 1
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.fixture
async def namespace(apiserver: ApiServer) -> AsyncIterator[str]:
    name = f"wl-{uuid.uuid4().hex[:8]}"
    async with KubeClient(apiserver.config()) as admin:
        await admin.create(NAMESPACES, {"metadata": {"name": name}})
        yield name


async def next_event(events: trio.MemoryReceiveChannel[WatchEvent]) -> WatchEvent:
    with trio.fail_after(60):
        return await events.receive()


async def test_state_and_changes_come_on_one_watch_request_and_no_list(
    apiserver: ApiServer, namespace: str
) -> None:
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
