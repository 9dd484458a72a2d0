"""Start-up runs with the cyclic GC off; every way out of it turns collection back on."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from nri_resmgr import app
from nri_resmgr.__main__ import main


@pytest.fixture
def gc_restored() -> Iterator[None]:
    yield
    gc.unfreeze()
    gc.enable()


def test_bad_flag_leaves_collection_on(gc_restored: None) -> None:
    with pytest.raises(SystemExit):  # argparse's own exit
        main(["--no-such-flag"])
    assert gc.isenabled()


def test_main_turns_collection_off_for_start_up(
    gc_restored: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[bool] = []

    def fake_main(options: object) -> int:
        seen.append(gc.isenabled())
        return 0

    monkeypatch.setattr(app, "main", fake_main)
    assert main(["--config-file", "/nonexistent.yaml"]) == 0
    assert seen == [False]
    assert gc.isenabled()


def test_freezing_the_start_up_heap_turns_collection_on(gc_restored: None) -> None:
    gc.disable()
    app.freeze_startup_heap()
    assert gc.isenabled()
    assert gc.get_freeze_count() > 0
