"""Reading one sysfs attribute file; below every other sysfs module, so each can share it."""

from __future__ import annotations

from pathlib import Path


def read_attr(path: Path) -> str | None:
    """The file's text without surrounding whitespace, or None when it cannot be read
    (absent attributes are how sysfs says "not on this machine")."""
    try:
        return path.read_text().strip()
    except OSError:
        return None
