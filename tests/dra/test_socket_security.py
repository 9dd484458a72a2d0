"""The kubelet-plugin sockets: 0600 whatever the umask, in directories nobody else can write."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from nri_resmgr.errors import Fatal
from tests.dra.conftest import make_plugin


@pytest.fixture
def open_umask() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


async def test_sockets_are_0600_under_umask_000(
    aio_loop: object, socket_dir: Path, open_umask: None
) -> None:
    plugin = make_plugin(socket_dir)
    modes: list[int] = []
    async with trio.open_nursery() as nursery:
        await plugin.start(nursery)
        modes = [mode(plugin.dra_socket), mode(plugin.registration_socket)]
        await plugin.stop()
    assert modes == [0o600, 0o600]


async def test_a_world_writable_socket_directory_is_tightened(
    aio_loop: object, socket_dir: Path
) -> None:
    plugin = make_plugin(socket_dir)
    plugin.plugin_dir.mkdir(parents=True)
    plugin.plugin_dir.chmod(0o777)
    async with trio.open_nursery() as nursery:
        await plugin.start(nursery)
        await plugin.stop()
    assert mode(plugin.plugin_dir) & (stat.S_IWGRP | stat.S_IWOTH) == 0


async def test_a_symlinked_socket_directory_is_refused(aio_loop: object, socket_dir: Path) -> None:
    plugin = make_plugin(socket_dir)
    elsewhere = socket_dir / "elsewhere"
    elsewhere.mkdir()
    plugin.plugin_dir.parent.mkdir(parents=True)
    plugin.plugin_dir.symlink_to(elsewhere)
    with pytest.raises(Exception) as caught, trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await plugin.start(nursery)
    fatal = _fatal_in(caught.value)
    assert "is a symlink" in str(fatal)
    assert list(elsewhere.iterdir()) == []  # nothing was bound through the link


def _fatal_in(exc: BaseException) -> Fatal:
    if isinstance(exc, Fatal):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            try:
                return _fatal_in(sub)
            except AssertionError:
                continue
    raise AssertionError(f"no Fatal in {exc!r}")
