"""A balloon instance: its type, its CPUs, and who is in it."""

from __future__ import annotations

import attrs

from nri_resmgr.config.models import BalloonType
from nri_resmgr.cpuset import CpuSet


@attrs.define
class Balloon:
    """A live balloon (mutable bookkeeping, owned by ``Balloons``)."""

    type: BalloonType
    index: int
    cpus: CpuSet
    members: dict[str, int] = attrs.field(factory=dict)
    """container id -> mCPU request."""
    pods: dict[str, str] = attrs.field(factory=dict)
    """container id -> pod id."""
    namespaces: dict[str, str] = attrs.field(factory=dict)
    groups: dict[str, str] = attrs.field(factory=dict)
    """container id -> groupBy value (only for types with groupBy)."""
    components: list[Balloon] = attrs.field(factory=list)
    """The component balloons of a composite balloon (their CPUs make up ``cpus``)."""
    claim: str = ""
    """The UID of the DRA claim this balloon was made for (``dra.py``), else empty: such a
    balloon has exactly the claim's CPUs, takes only the claim's containers, and neither
    inflates, deflates nor goes away until the claim is unprepared."""

    @property
    def name(self) -> str:
        return f"{self.type.name}[{self.index}]"

    @property
    def requested(self) -> int:
        return sum(self.members.values())


__all__ = ["Balloon"]
