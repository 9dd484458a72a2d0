"""Fixtures for the NRI conformance tests: Go peers built on demand, short socket dirs."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.conformance.build import GOPLUGIN, HARNESSES, BuildError, ensure_binary
from tests.conformance.peer import Harness, open_harness


def _built(target_name: str) -> Path:
    target = HARNESSES.get(target_name, GOPLUGIN)
    try:
        return ensure_binary(target)
    except BuildError as exc:
        pytest.fail(f"cannot build the Go peer {target.name}: {exc}")


@pytest.fixture(scope="session")
def harness_binaries() -> dict[str, Path]:
    return {version: _built(version) for version in HARNESSES}


@pytest.fixture(scope="session")
def goplugin_binary() -> Path:
    return _built("goplugin")


@pytest.fixture
def sockdir() -> Iterator[Path]:
    """A short private dir: unix socket paths must stay under ~100 bytes, which pytest's
    tmp_path does not promise."""
    path = Path(tempfile.mkdtemp(prefix="nri-conf-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(params=sorted(HARNESSES))
def nri_version(request: pytest.FixtureRequest) -> str:
    """The NRI release the runtime side runs: "v0.12" (latest) or "v0.6" (containerd 1.7)."""
    return str(request.param)


@pytest.fixture
async def harness(
    harness_binaries: dict[str, Path], nri_version: str, sockdir: Path
) -> AsyncIterator[Harness]:
    async with open_harness(harness_binaries[nri_version], sockdir) as h:
        yield h
