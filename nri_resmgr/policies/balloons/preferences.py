"""What a container's pod annotations ask of the balloons policy, decoded once per container
(``preferences_of``): each key at its narrowest scope (``annotations.Annotations``), a
boolean that does not parse logged then and ignored."""

from __future__ import annotations

import attrs

from nri_resmgr.policies.annotations import Annotations, Decoded

__all__ = ["ANNOTATION", "NO_PREFERENCES", "BalloonPreferences", "preferences_of"]

ANNOTATION = "balloon.balloons"
"""``balloon.balloons.resource-policy.nri.io`` (with ``/pod`` and ``/container.<name>``)."""


@attrs.frozen
class BalloonPreferences:
    balloon: str | None = None
    """The balloon type asked for by name (``ANNOTATION``)."""
    cpu_preserve: bool = False
    """``cpu.preserve``: the container keeps the cpuset the runtime gave it."""
    keep_mems: bool = False
    """``memory.preserve``: cpuset.mems left as the runtime has them."""
    hide_hyperthreads: bool | None = None
    """None: the balloon type's ``hideHyperthreads``."""
    memory_type: str | None = None
    """Overrides the balloon type's ``memoryTypes`` (parsed where it is used)."""

    @classmethod
    def decode(cls, a: Annotations) -> BalloonPreferences:
        return cls(
            balloon=a.get(ANNOTATION),
            cpu_preserve=a.flag("cpu.preserve") is True,
            keep_mems=a.flag("memory.preserve") is True,
            hide_hyperthreads=a.flag("hide-hyperthreads"),
            memory_type=a.get("memory-type"),
        )


NO_PREFERENCES = BalloonPreferences()
"""A pod without annotations asks for nothing: the defaults, shared."""

preferences_of = Decoded(BalloonPreferences.decode, NO_PREFERENCES)
"""``preferences_of(pod, container)``: the container's preferences, decoded once per event."""
