"""Under CI every test runs or fails: a skip there is reported as a failure.

A skipped test proves nothing, and a CI run that skips a part (a peer it could not build, a
machine without ``/dev/shm`` or matplotlib) would still pass. So when ``CI`` says this is a
CI run (``tests.peers.in_ci``: ``true``, ``1`` or ``yes``, any case), a test or a module that
skips fails instead, with the skip's reason. An expected failure (``xfail``) still counts as
run. Loaded by ``tests/conftest.py``.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest

from tests.peers import in_ci


def _reason(longrepr: Any) -> str:
    # A skip's longrepr is (file, line, "Skipped: reason").
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _fail_if_skipped(report: pytest.TestReport | pytest.CollectReport) -> None:
    if report.skipped and in_ci() and not hasattr(report, "wasxfail"):
        why = _reason(report.longrepr)
        report.outcome = "failed"
        report.longrepr = (
            f"skipped under CI (CI={os.environ.get('CI')!r}), where every test runs or fails: {why}"
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    outcome = yield
    _fail_if_skipped(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, None]:
    outcome = yield
    _fail_if_skipped(outcome.get_result())
