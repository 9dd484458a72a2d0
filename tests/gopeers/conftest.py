"""The cold-cache builds run only when asked for (``nox -s gopeers``, NRI_RESMGR_GO_COLD=1):
each downloads its whole module graph and compiles it from nothing, an hour or more for all
of them on a 2-CPU machine. Elsewhere they are deselected, not skipped."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

COLD = os.environ.get("NRI_RESMGR_GO_COLD", "").lower() in ("1", "true", "yes")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if COLD:
        return
    here = Path(__file__).parent
    mine = [i for i in items if here in Path(str(i.fspath)).parents]
    if mine:
        config.hook.pytest_deselected(items=mine)
        items[:] = [i for i in items if i not in mine]
