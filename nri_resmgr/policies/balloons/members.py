"""The balloons' allocations, remembering which ones were written since the last refresh.

A refresh walks what the runtime must be told after a decision. Walking every container on
every decision made that O(containers); with this record it checks only the allocations
written since the last refresh and the members of balloons whose cpus or mems changed.
Invariant: a member not in ``dirty``, of a balloon whose ``verified`` value equals what the
balloon wants now, needs no update (``follow`` is idempotent for an unchanged target).
"""

from __future__ import annotations

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.allocations import Allocation, AllocationCache

Wanted = tuple[CpuSet | None, CpuSet | None]
"""The (cpus, mems) a balloon's members should have."""


class Members(AllocationCache):
    """An ``AllocationCache`` where every write marks the container for the next refresh."""

    def __init__(self) -> None:
        super().__init__()
        self.dirty: set[str] = set()
        """Containers written since the last refresh checked them."""
        self.verified: dict[str, Wanted] = {}
        """Balloon name -> the target its clean members were last checked against."""

    def put(self, allocation: Allocation) -> None:
        super().put(allocation)
        self.dirty.add(allocation.container_id)

    def store_checked(self, allocation: Allocation) -> None:
        """Write what a refresh has just brought up to date (it stays clean)."""
        super().put(allocation)
        self.dirty.discard(allocation.container_id)

    def pop(self, container_id: str) -> Allocation | None:
        self.dirty.discard(container_id)
        return super().pop(container_id)

    def clear(self) -> None:
        super().clear()
        self.dirty.clear()
        self.verified.clear()


__all__ = ["Members", "Wanted"]
