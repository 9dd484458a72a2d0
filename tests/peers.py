"""What a test does when a real peer (a Go binary built from upstream) is missing.

A real peer is the proof behind the tests that use it, so in CI (``CI=true``, as CI
services set it) a peer that cannot be built or started fails the test: a skipped proof
would let the run pass with nothing proven. On a developer machine without Go the same tests
skip, with the reason, so the fast tests stay usable there.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

TRUE_VALUES = frozenset({"1", "true", "yes"})


def in_ci() -> bool:
    """True when the ``CI`` environment variable says this is a CI run."""
    return os.environ.get("CI", "").strip().lower() in TRUE_VALUES


def missing_peer(reason: str) -> NoReturn:
    """Fails the current test under CI, skips it elsewhere; never returns."""
    if in_ci():
        pytest.fail(f"real peer unavailable in CI (CI=true): {reason}", pytrace=False)
    pytest.skip(f"{reason} (set CI=true to make this a failure)")
