"""tools/mutation_narrow.py replaces only mutmut's test selection in a copy of pyproject."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tools.mutation_narrow import narrowed

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_the_selection_is_replaced_and_the_rest_kept() -> None:
    original = tomllib.loads(PYPROJECT.read_text())
    copy = tomllib.loads(narrowed(PYPROJECT.read_text(), ["tests/config"]))
    selection = copy["tool"]["mutmut"].pop("pytest_add_cli_args_test_selection")
    assert selection == ["tests/config", "-m", "not integration", "-p", "no:cacheprovider"]
    del original["tool"]["mutmut"]["pytest_add_cli_args_test_selection"]
    assert copy == original


def test_a_narrowed_copy_can_be_narrowed_again() -> None:
    once = narrowed(PYPROJECT.read_text(), ["tests/config"])
    assert narrowed(once, ["tests/dra"]) == narrowed(PYPROJECT.read_text(), ["tests/dra"])


def test_a_pyproject_without_a_selection_is_refused() -> None:
    with pytest.raises(SystemExit, match="no pytest_add_cli_args_test_selection"):
        narrowed("[tool.mutmut]\n", ["tests/config"])
