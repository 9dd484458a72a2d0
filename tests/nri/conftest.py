"""Fixtures of the NRI tests."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    # Unix socket paths are limited to ~108 bytes; pytest's tmp_path can be longer.
    path = Path(tempfile.mkdtemp(prefix="nri-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def sock_path(sock_dir: Path) -> str:
    return str(sock_dir / "nri.sock")
