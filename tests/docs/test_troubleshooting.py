"""Every message docs/troubleshooting.md quotes in a heading is in the code, word for word:
the parts written ``<like this>`` stand for what the code fills in, the rest must be one
string of the code (implicit concatenation joined, f-string fields and %-placeholders being
the filled-in parts)."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "troubleshooting.md"
HEADING = re.compile(r"^### `(.+)`$")


def quoted() -> list[str]:
    return [m.group(1) for line in PAGE.read_text().splitlines() if (m := HEADING.match(line))]


def _text(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


@cache
def code_strings() -> tuple[str, ...]:
    found = []
    for path in (ROOT / "nri_resmgr").rglob("*.py"):
        if "_gen" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            text = _text(node)
            if text:
                found.append(text)
    return tuple(found)


def pattern(message: str) -> re.Pattern[str]:
    parts = re.split(r"<[^>]+>", message)
    return re.compile(".+?".join(re.escape(p) for p in parts), re.DOTALL)


def test_the_page_quotes_messages() -> None:
    assert len(quoted()) >= 10


@pytest.mark.parametrize("message", quoted())
def test_quoted_message_is_in_the_code(message: str) -> None:
    wanted = pattern(message)
    assert any(wanted.search(s) for s in code_strings()), message


def test_a_message_not_in_the_code_is_not_found() -> None:
    assert not any(pattern("balloon allocation <x> succeeded").search(s) for s in code_strings())
