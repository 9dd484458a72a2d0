"""Fixtures: a fake API server per test (fast) and a real kube-apiserver per session."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import pytest
import trio

from nri_resmgr.kube import ClusterConfig, KubeClient
from nri_resmgr.kube.auth import StaticToken, TokenSource
from tests.kube.apiserver import ApiServer, start_apiserver
from tests.kube.fakeserver import FakeServer, Handler

ServeFake = Callable[..., Awaitable[tuple[FakeServer, KubeClient]]]


@pytest.fixture
async def serve_fake(nursery: trio.Nursery) -> AsyncIterator[ServeFake]:
    """Starts a fake server with a handler and returns it with a client pointed at it."""
    clients: list[KubeClient] = []

    async def start(
        handler: Handler, token: TokenSource | None = None
    ) -> tuple[FakeServer, KubeClient]:
        server = FakeServer(handler)
        url = await nursery.start(server.serve)
        client = KubeClient(ClusterConfig(server=url, token=token or StaticToken("secret")))
        clients.append(client)
        return server, client

    yield start
    for client in clients:
        await client.aclose()


@pytest.fixture(scope="session")
def apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """A real etcd + kube-apiserver on loopback, built on first use; shared by the session."""
    server = start_apiserver(tmp_path_factory.mktemp("apiserver"))
    try:
        yield server
    finally:
        server.shutdown()
