"""Every hypothesis test runs without a wall-clock deadline (the profile in tests/conftest.py)."""

from __future__ import annotations

from hypothesis import settings


def test_the_loaded_profile_has_no_deadline() -> None:
    # Tests that pass no deadline of their own inherit settings.default.
    assert settings.default.deadline is None
    assert settings.get_profile("nri-resmgr").deadline is None
