"""The docs site builds with mkdocs in strict mode: a broken link or anchor, a page left out
of the nav, a missing page or any other warning fails the build, and so this test (and
`.ci/run`, whose tests session runs it)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("mkdocs", reason="the docs extra is not installed (pip install -e .[docs])")
    pytest.importorskip("material", reason="mkdocs-material is not installed")
    env = {"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=root, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_the_docs_site_builds_strictly_without_warnings(tmp_path: Path) -> None:
    result = _build(ROOT, tmp_path / "site")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARNING" not in result.stderr, result.stderr
    assert (tmp_path / "site" / "configuration" / "index.html").is_file()


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(ROOT / "mkdocs.yml", copy)
    shutil.copytree(ROOT / "docs", copy / "docs")
    page = copy / "docs" / "troubleshooting.md"
    page.write_text(page.read_text() + "\nSee [the missing page](no-such-page.md).\n")
    result = _build(copy, tmp_path / "site")
    assert result.returncode != 0
    assert "no-such-page.md" in result.stdout + result.stderr


def test_every_page_of_docs_is_in_the_nav() -> None:
    import yaml

    def pages_of(nav: object) -> set[str]:
        if isinstance(nav, str):
            return {nav}
        items = nav.values() if isinstance(nav, dict) else nav
        assert isinstance(items, list | type({}.values()))
        return set().union(*(pages_of(x) for x in items))

    in_nav = pages_of(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert pages == in_nav
