"""Agent fixtures: the in-memory FakeKube (fast) and the project's CRD on the real server."""

from __future__ import annotations

import contextlib

import pytest
import trio

from nri_resmgr.kube import AlreadyExists, KubeClient
from nri_resmgr.kube.resources import CUSTOM_RESOURCE_DEFINITIONS
from tests.agent.fakekube import FakeKube
from tests.kube.apiserver import ApiServer
from tests.kube.conftest import ServeFake, serve_fake  # noqa: F401  (fixture)
from tools.crdschema import crd

KIND = "TemplatePolicy"


@pytest.fixture
async def fake(serve_fake: ServeFake) -> tuple[FakeKube, KubeClient]:  # noqa: F811
    kube = FakeKube()
    _, client = await serve_fake(kube.handle)
    return kube, client


@pytest.fixture(scope="session")
def template_crd(apiserver: ApiServer) -> ApiServer:
    """The TemplatePolicy CRD, generated from the config models, applied and established."""
    return with_template_crd(apiserver)


@pytest.fixture(scope="session")
def balloons_crd(apiserver: ApiServer) -> ApiServer:
    """The BalloonsPolicy CRD, as ``template_crd``."""
    return with_template_crd(apiserver, "BalloonsPolicy")


@pytest.fixture(scope="session")
def balloons_crd_137(apiserver_137: ApiServer) -> ApiServer:
    """The BalloonsPolicy CRD on the session's v1.37.2 API server (consumable capacity on:
    published balloon types' shared devices are stored as sent)."""
    return with_template_crd(apiserver_137, "BalloonsPolicy")


def with_template_crd(server: ApiServer, kind: str = KIND) -> ApiServer:
    """``server`` with the CRD of ``kind`` (TemplatePolicy unless named) applied and
    established (again: a no-op)."""

    async def apply() -> None:
        async with KubeClient(server.config()) as client:
            document = crd(kind)
            with contextlib.suppress(AlreadyExists):
                await client.create(CUSTOM_RESOURCE_DEFINITIONS, document)
            with trio.fail_after(60):
                while not await _established(client, document["metadata"]["name"]):
                    await trio.sleep(0.1)

    trio.run(apply)
    return server


async def _established(client: KubeClient, name: str) -> bool:
    got = await client.get(CUSTOM_RESOURCE_DEFINITIONS, name)
    conditions = (got.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)
