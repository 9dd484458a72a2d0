"""JSON from the API server that cannot crash the daemon, however deeply it is nested.

The API server accepts objects nested up to 10,000 levels, Python's json module gives up
with ``RecursionError`` at about 1,000. One policy CR with a deeply nested free-form field
reaches every node, so a decode that raises would end every daemon, again on each restart.

``loads`` decodes normally; only when the text is too deep it cuts every value below
``MAX_DEPTH`` levels and puts ``TOO_DEEP`` in its place. Metadata (name, uid, generation,
resourceVersion) sits near the top and survives, so the object can still be followed and
its configuration rejected with a clear error (the config loader refuses any structure in a
free-form field deeper than it allows, and a marker where a typed value belongs).
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

log = logging.getLogger(__name__)

# Far deeper than any real object (a CR spec is a handful of levels), far below the limit
# where json (and the recursion of whoever walks the result) fails.
MAX_DEPTH = 100
TOO_DEEP = f"<value nested deeper than {MAX_DEPTH} levels removed>"

# A JSON string (with escapes) or one bracket: strings are skipped so brackets inside them
# do not count.
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


def loads(text: str | bytes) -> Any:
    """``json.loads``, except that values nested deeper than ``MAX_DEPTH`` become ``TOO_DEEP``.

    Raises ValueError for text that is not JSON, as ``json.loads`` does.
    """
    try:
        return json.loads(text)
    except RecursionError:
        pass
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    log.warning("a JSON reply of %d characters is nested deeper than %d levels; cutting it",
                len(text), MAX_DEPTH)  # fmt: skip
    return json.loads(_cut_deep(text))


def _cut_deep(text: str) -> str:
    """The text with every container opened below ``MAX_DEPTH`` replaced by ``TOO_DEEP``."""
    out: list[str] = []
    kept_until = 0  # text[:kept_until] is already in out (or deliberately dropped)
    depth = 0
    cut_start = -1
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token[0] == '"':
            continue
        if token in "[{":
            depth += 1
            if depth == MAX_DEPTH + 1 and cut_start < 0:
                cut_start = match.start()
        else:
            depth -= 1
            if depth == MAX_DEPTH and cut_start >= 0:
                out.append(text[kept_until:cut_start])
                out.append(json.dumps(TOO_DEEP))
                kept_until = match.end()
                cut_start = -1
    if cut_start >= 0:  # never closed: not JSON; let json.loads say so
        return text
    out.append(text[kept_until:])
    return "".join(out)
