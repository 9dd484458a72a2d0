"""The real-apiserver fixture fails under CI when its peer cannot be built, and skips elsewhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kube import apiserver
from tests.kube.gobuild import BuildError


def _unbuildable(version: str) -> tuple[Path, Path]:
    raise BuildError("the Go toolchain (go) is not on PATH")


@pytest.mark.parametrize("value", ["true", "1", "TRUE"])
def test_an_unbuildable_apiserver_fails_the_test_under_ci(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, value: str
) -> None:
    monkeypatch.setattr(apiserver, "ensure_binaries", _unbuildable)
    monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.fail.Exception, match=r"CI=true.*not on PATH"):
        apiserver.start_apiserver(tmp_path)


@pytest.mark.parametrize("value", [None, "", "false", "0"])
def test_an_unbuildable_apiserver_skips_outside_ci(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, value: str | None
) -> None:
    monkeypatch.setattr(apiserver, "ensure_binaries", _unbuildable)
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.skip.Exception, match="not on PATH"):
        apiserver.start_apiserver(tmp_path)
