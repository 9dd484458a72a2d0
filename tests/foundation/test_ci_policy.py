"""Under CI every test runs or fails (issue 34 item 13): ``CI=1`` made the real-runtime tests
skip with exit status 0, and two tests skipped when the machine lacked something."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.peers import in_ci

ROOT = Path(__file__).resolve().parents[2]

SAMPLE = """\
import pytest

def test_runs():
    assert True

def test_skips():
    pytest.skip("the machine lacks something")

@pytest.mark.xfail(strict=True, reason="waiting for a feature")
def test_expected_failure():
    assert False
"""


def run_sample(
    tmp_path: Path, ci: str | None, body: str = SAMPLE
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_sample.py").write_text(body)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.ci_policy", "-p", "no:cacheprovider",
         "-q", "-rA", "--rootdir", str(tmp_path), "-c", "/dev/null", str(tmp_path)],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120, check=False,
    )  # fmt: skip


@pytest.mark.parametrize("ci", ["true", "1", "yes", "TRUE"])
def test_a_skip_fails_under_every_spelling_of_ci(tmp_path: Path, ci: str) -> None:
    proc = run_sample(tmp_path, ci)
    assert proc.returncode == 1, proc.stdout
    assert "1 failed, 1 passed, 1 xfailed" in proc.stdout
    assert "skipped under CI" in proc.stdout and "the machine lacks something" in proc.stdout


@pytest.mark.parametrize("ci", [None, "", "false", "0"])
def test_outside_ci_a_skip_stays_a_skip(tmp_path: Path, ci: str | None) -> None:
    proc = run_sample(tmp_path, ci)
    assert proc.returncode == 0, proc.stdout
    assert "1 passed, 1 skipped, 1 xfailed" in proc.stdout


def test_a_module_that_skips_fails_under_ci(tmp_path: Path) -> None:
    body = 'import pytest\npytest.importorskip("no_such_module_here")\n'
    proc = run_sample(tmp_path, "1", body)
    assert proc.returncode != 0, proc.stdout
    assert "skipped under CI" in proc.stdout


def test_the_real_runtime_fixture_fails_under_ci_1(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.runtime.conftest import unavailable

    monkeypatch.setenv("CI", "1")
    assert in_ci()
    with pytest.raises(pytest.fail.Exception, match="unavailable under CI"):
        unavailable("containerd needs root")
