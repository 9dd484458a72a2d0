"""Fixtures: a fake API server per test (fast); the real kube-apiserver is in tests/conftest.py."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import trio

from nri_resmgr.kube import ClusterConfig, KubeClient
from nri_resmgr.kube.auth import StaticToken, TokenSource
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
        config = ClusterConfig(
            server=url, token=token or StaticToken("secret"), allow_http_token=True
        )
        client = KubeClient(config)
        clients.append(client)
        return server, client

    yield start
    for client in clients:
        await client.aclose()
