"""Fixtures for the DRA plugin tests: an asyncio loop under trio, grpcio "kubelet" stubs
generated from our protos, and a running plugin (the kubelet-plugin layer over a fake
driver and an in-process claim store) in temporary directories."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import attrs
import pytest
import trio
import trio_asyncio

from nri_resmgr.config.models import DraConfig, TemplateSpec
from nri_resmgr.dra.kubeletplugin import KubeletPlugin
from nri_resmgr.policies.template import TemplatePolicy
from nri_resmgr.resmgr.manager import ResourceManager
from nri_resmgr.resmgr.policy import Policy, PolicyEnv
from tests.dra.claim_setup import Claims
from tests.dra.fake_driver import DRIVER, AllocatedEverywhere, FakeDriver, uid
from tests.dra.kubelet_client import Kubelet, KubeletStubs, generate_grpcio_stubs

NODE = "node-1"

__all__ = ["DRIVER", "NODE", "AllocatedEverywhere", "uid"]


@pytest.fixture(scope="session")
def kubelet_stubs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeletStubs]:
    out = tmp_path_factory.mktemp("grpcio-stubs")
    stubs = generate_grpcio_stubs(out)
    yield stubs
    sys.path.remove(str(out))


@pytest.fixture
async def aio_loop() -> AsyncIterator[object]:
    async with trio_asyncio.open_loop() as loop:
        yield loop


def make_manager(policy: Policy | None = None) -> ResourceManager:
    spec = TemplateSpec(dra=DraConfig(enabled=True))
    return ResourceManager(policy or TemplatePolicy(), spec, PolicyEnv(node_name=NODE))


async def wait_until(condition: Callable[[], bool], limit: float = 10.0) -> None:
    """Poll ``condition``; ``limit`` only keeps a broken test from hanging."""
    with trio.fail_after(limit):
        while not condition():
            await trio.sleep(0.01)


@attrs.define
class RunningPlugin:
    plugin: KubeletPlugin
    driver: FakeDriver
    claims: Claims
    nursery: trio.Nursery

    @property
    def reg_socket(self) -> Path:
        return self.plugin.registration_socket

    @property
    def dra_socket(self) -> Path:
        return self.plugin.dra_socket


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    # unix socket paths are limited to 107 bytes; pytest's tmp_path can exceed that.
    with tempfile.TemporaryDirectory(prefix="dra-") as d:
        yield Path(d)


@pytest.fixture
def kubelet(kubelet_stubs: KubeletStubs) -> Iterator[Kubelet]:
    client = Kubelet(kubelet_stubs)
    yield client
    client.close()


def make_plugin(
    base: Path,
    driver: FakeDriver | None = None,
    claims: Claims | None = None,
    *,
    drain_timeout: float = 5.0,
) -> KubeletPlugin:
    return KubeletPlugin(
        driver or FakeDriver(),
        DRIVER,
        claims or AllocatedEverywhere(),  # type: ignore[arg-type]
        base / "plugins",
        base / "plugins_registry",
        cdi_dir=base / "cdi",
        poll_interval=0.05,
        drain_timeout=drain_timeout,
    )


@pytest.fixture
async def running_plugin(aio_loop: object, socket_dir: Path) -> AsyncIterator[RunningPlugin]:
    driver, claims = FakeDriver(), AllocatedEverywhere()
    plugin = make_plugin(socket_dir, driver, claims)
    async with trio.open_nursery() as nursery:
        await plugin.start(nursery)
        yield RunningPlugin(plugin, driver, claims, nursery)
        await plugin.stop()
