"""A running container as restore and the batch placement take it: what it wants, and the
cpuset and memory nodes it has now."""

from __future__ import annotations

import attrs

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.requests import Request
from nri_resmgr.policies.topology_aware.preferences import Want
from nri_resmgr.resmgr.model import Container, Pod


@attrs.frozen
class Live:
    """A running container, what it wants, and the cpuset/mems it has now."""

    pod: Pod
    container: Container
    want: Want
    keep_mems: bool
    cpus: CpuSet | None
    mems: CpuSet | None
    req: Request
    """The request ``want`` was derived from, kept for the memory want (``memory_want``)."""
    fell_back: bool = False
    """A reserved-class container that runs on normal shared CPUs because the reserved ones
    were full when it came: restore keeps it there while that still holds."""

    @property
    def name(self) -> str:
        return f"{self.pod.namespace}/{self.pod.name}/{self.container.name}"


__all__ = ["Live"]
