"""Fixtures of the reliability tests: short socket paths and a synthetic machine."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from nri_resmgr.sim.synthetic import N4C16, write_sysfs

# Shared fixtures: the agent's FakeKube and fake server, the Go NRI harness, the DRA tests'
# asyncio loop under trio and grpcio "kubelet" stubs.
from tests.agent.conftest import fake  # noqa: F401
from tests.conformance.conftest import harness, harness_binaries, nri_version, sockdir  # noqa: F401
from tests.dra.conftest import aio_loop, kubelet_stubs  # noqa: F401
from tests.kube.conftest import serve_fake  # noqa: F401


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    # Unix socket paths are limited to ~108 bytes; pytest's tmp_path can be longer.
    path = Path(tempfile.mkdtemp(prefix="rel-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def host_root(tmp_path: Path) -> Path:
    """A 2-socket, 4-NUMA-node, 16-CPU machine under ``tmp_path`` (``--host-root``)."""
    return write_sysfs(tmp_path / "host", N4C16)
