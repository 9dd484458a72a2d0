"""The hook through which a replay's pods can go to a real node instead (tests/node)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

GuestHook = Callable[[str, Mapping[str, Any], Any, type[Exception]], Any]
"""``(policy kind, the configuration as helm renders it, the scenario's topology, the
exception meaning "the runtime refused the container") -> a runtime`` with the in-process
runtime's interface (``create``, ``stop``, ``remove``, ``cpus``, ``mems``)."""
