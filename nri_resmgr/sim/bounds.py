"""Bounds on the YAML ``simulate`` reads (workload and configuration), checked before it is
built into values.

YAML aliases share one node however often they are used, so a few hundred bytes of nested
aliases stand for billions of values: anything that walks or prints the result (an error
message quoting a bad value, say) then runs for minutes with memory growing. Deep nesting
makes the composer and the loader recurse into a RecursionError. So the event stream is read
first (PyYAML's parser keeps a stack of its own, it does not recurse), counting nesting and
the values each alias stands for, and the first bound crossed is a ``ConfigError`` naming it
and where.
"""

from __future__ import annotations

import yaml

from nri_resmgr.errors import ConfigError

MAX_DEPTH = 100
"""Collections inside collections; a Pod with managedFields nests about 20 deep."""
MAX_VALUES = 1_000_000
"""Scalars and collections once every alias is expanded; a node's `kubectl get pods -o
yaml` (110 pods, managedFields included) is well under 100,000."""


def check_yaml(text: str, source: str) -> None:
    """Raise ``ConfigError`` if ``text`` nests deeper than ``MAX_DEPTH`` or, aliases
    expanded, holds more than ``MAX_VALUES`` values. Malformed YAML is left to the loader,
    which says where."""
    sizes: dict[str, int] = {}  # anchor -> the values it stands for
    open_: list[tuple[str | None, int]] = []  # each open collection: its anchor, values so far
    done = 0  # values of the documents' completed top-level nodes
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.CollectionStartEvent):
                open_.append((event.anchor, 1))
                if len(open_) > MAX_DEPTH:
                    _refuse(source, event, f"nested deeper than {MAX_DEPTH} levels")
                continue
            if isinstance(event, yaml.CollectionEndEvent):
                anchor, count = open_.pop()
            elif isinstance(event, yaml.AliasEvent):
                anchor, count = None, sizes.get(event.anchor or "", 1)
            elif isinstance(event, yaml.ScalarEvent):
                anchor, count = event.anchor, 1
            else:
                continue
            if anchor:
                sizes[anchor] = count
            if open_:
                parent, so_far = open_[-1]
                open_[-1] = (parent, so_far + count)
            else:
                done += count
            if done + sum(n for _, n in open_) > MAX_VALUES:
                _refuse(source, event, f"more than {MAX_VALUES} values once aliases are expanded")
    except yaml.YAMLError:
        return


def _refuse(source: str, event: yaml.Event, problem: str) -> None:
    mark = event.start_mark
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    raise ConfigError(f"{source}: YAML {problem}{where}")


__all__ = ["MAX_DEPTH", "MAX_VALUES", "check_yaml"]
