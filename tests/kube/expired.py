"""A transport that makes a real API server answer every watch with 410 Gone.

It pins the watch's resourceVersion to "1". An API server's watch cache starts at the
version current when the server started, so after a restart "1" is too old and the server
itself sends the 410 each time: the situation after an etcd compaction or a long partition,
where a watch from the version just listed can still be expired (another API server behind
a load balancer, a lagging cache). It also counts the LIST and WATCH requests that reach
the server.
"""

from __future__ import annotations

import attrs
import httpx

from nri_resmgr.kube import ClusterConfig, KubeClient


@attrs.define
class ExpiringWatches(httpx.AsyncBaseTransport):
    inner: httpx.AsyncBaseTransport
    lists: int = 0
    watches: int = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.params.get("watch") == "true":
            self.watches += 1
            request.url = request.url.copy_set_param("resourceVersion", "1")
        elif request.method == "GET":
            self.lists += 1
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def expiring_client(config: ClusterConfig) -> tuple[KubeClient, ExpiringWatches]:
    transport = ExpiringWatches(httpx.AsyncHTTPTransport(verify=config.ssl_context()))
    return KubeClient(config, transport=transport), transport
