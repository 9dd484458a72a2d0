"""KubeletPlugin's construction, directories and log lines.
(Written to kill the mutants `nox -s mutation` found surviving in dra/plugin.py.)"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from nri_resmgr.dra.kubeletplugin import KubeletPlugin
from nri_resmgr.errors import Fatal
from tests.dra.conftest import DRIVER, AllocatedEverywhere, make_plugin
from tests.dra.fake_driver import FakeDriver


@pytest.fixture
def umask_000() -> Iterator[None]:
    # No umask: the modes asked for are the modes made (0o750 would survive a 022 mask as
    # is, but so would a missing mode, 0o777 & ~0o022 == 0o755).
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_an_empty_driver_name_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^DRA driver name must not be empty$"):
        KubeletPlugin(FakeDriver(), "", AllocatedEverywhere())  # type: ignore[arg-type]


def test_the_parts_are_wired_with_what_was_given(socket_dir: Path) -> None:
    driver, kube = FakeDriver(), AllocatedEverywhere()
    plugin = KubeletPlugin(driver, DRIVER, kube, socket_dir / "p", socket_dir / "r",  # type: ignore[arg-type]
                           cdi_dir=socket_dir / "cdi", drain_timeout=1.5,
                           poll_interval=0.25)  # fmt: skip
    assert plugin.driver is driver
    assert (plugin.claims.driver, plugin.claims.driver_name, plugin.claims.kube) == (
        driver,
        DRIVER,
        kube,
    )
    assert plugin.claims.metadata is not None
    assert plugin.claims.metadata.host_dir == socket_dir / "p" / DRIVER / "dra-device-metadata"
    assert plugin.claims.metadata.cdi_dir == socket_dir / "cdi"
    for server, name in ((plugin._dra, "DRA"), (plugin._registration, "registration")):
        assert server.name == name
        assert (server._drain_timeout, server._poll_interval) == (1.5, 0.25)
    without = KubeletPlugin(driver, DRIVER, kube, device_metadata=False)  # type: ignore[arg-type]
    assert without.claims.metadata is None


async def test_directories_are_made_with_kubelets_modes_and_parents(
    aio_loop: object, socket_dir: Path, umask_000: None
) -> None:
    plugin = KubeletPlugin(FakeDriver(), DRIVER, AllocatedEverywhere(),  # type: ignore[arg-type]
                           socket_dir / "a" / "b", socket_dir / "c" / "d")  # fmt: skip
    async with trio.open_nursery() as nursery:
        await plugin.start(nursery)
        await plugin.stop()
    assert plugin.plugin_dir.stat().st_mode & 0o777 == 0o750
    assert plugin.registry_dir.stat().st_mode & 0o777 == 0o755


async def test_a_directory_that_cannot_be_made_is_fatal(socket_dir: Path) -> None:
    (socket_dir / "file").write_text("")
    plugin = make_plugin(socket_dir / "file")
    with pytest.raises(Fatal, match=f"^DRA driver {DRIVER}: cannot create socket directory: "):
        await plugin.serve()


async def test_a_socket_that_cannot_be_bound_is_fatal(aio_loop: object, socket_dir: Path) -> None:
    deep = socket_dir / ("d" * 120)  # a unix socket path over the 107-byte limit
    plugin = make_plugin(deep)
    with pytest.raises(Fatal, match=f"^DRA driver {DRIVER}: cannot serve: "):
        await plugin.serve()


async def test_serving_and_stopping_are_logged(
    aio_loop: object, socket_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    plugin = make_plugin(socket_dir)
    async with trio.open_nursery() as nursery:
        await plugin.start(nursery)
        await plugin.stop()
    lines = [r.getMessage() for r in caplog.records]
    assert f"DRA driver {DRIVER} serving on {plugin.dra_socket}" in lines
    assert f"DRA driver {DRIVER} stopped" in lines
    assert f"DRA gRPC server listening on {plugin.dra_socket}" in lines
    assert f"registration gRPC server listening on {plugin.registration_socket}" in lines
