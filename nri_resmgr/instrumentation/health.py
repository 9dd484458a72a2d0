"""Liveness and readiness, as the HTTP probes report them.

Readiness is a set of named conditions (``nri``: registered with the runtime and
synchronized; ``dra``: registered with kubelet), each required once declared. The services
that know set them; the probe only reads. Process-wide, like nri-plugins' healthz registry,
because the conditions belong to the one daemon in the process.
"""

from __future__ import annotations

import attrs


@attrs.define
class Readiness:
    _conditions: dict[str, bool] = attrs.field(factory=dict)

    def require(self, name: str) -> None:
        """Declare a condition; the daemon is not ready until it is set."""
        self._conditions.setdefault(name, False)

    def set(self, name: str, ok: bool) -> None:
        self._conditions[name] = ok

    def reset(self) -> None:
        self._conditions.clear()

    def missing(self) -> list[str]:
        return sorted(name for name, ok in self._conditions.items() if not ok)

    @property
    def ready(self) -> bool:
        return bool(self._conditions) and not self.missing()


READINESS = Readiness()
"""The process's readiness conditions."""

__all__ = ["READINESS", "Readiness"]
