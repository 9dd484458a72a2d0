"""What each container got from the policy: the bookkeeping behind every placement decision.

Policies keep one ``AllocationCache``. It is in memory only: after a restart, a policy rebuilds
it in Synchronize from the cpusets the runtime reports, so running containers stay put.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator

import attrs

from nri_resmgr.resmgr.cpuset import CpuSet


class Kind(enum.Enum):
    SHARED = "shared"
    EXCLUSIVE = "exclusive"
    MIXED = "exclusive+shared"
    RESERVED = "reserved"
    PRESERVE = "preserve"


@attrs.frozen
class Allocation:
    container_id: str
    pod_id: str
    name: str
    """ns/pod/container, for logs."""
    pool: str
    """The topology-aware pool or the balloon instance."""
    kind: Kind
    request: int
    """mCPU requested (the shared part's weight)."""
    exclusive: CpuSet = attrs.field(factory=CpuSet)
    """CPUs held by this container alone (empty for shared containers)."""
    isolated: bool = False
    cpus: CpuSet | None = None
    """The cpuset last applied to the container; None when the policy leaves it alone."""
    mems: CpuSet | None = None
    keep_mems: bool = False
    """memory.preserve: the policy leaves cpuset.mems alone."""

    @property
    def shared_part(self) -> int:
        return self.request % 1000 if self.kind is Kind.MIXED else self.request


class AllocationCache:
    def __init__(self) -> None:
        self._by_id: dict[str, Allocation] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    def __iter__(self) -> Iterator[Allocation]:
        return iter(list(self._by_id.values()))

    def __contains__(self, container_id: object) -> bool:
        return container_id in self._by_id

    def get(self, container_id: str) -> Allocation | None:
        return self._by_id.get(container_id)

    def put(self, allocation: Allocation) -> None:
        self._by_id[allocation.container_id] = allocation

    def pop(self, container_id: str) -> Allocation | None:
        return self._by_id.pop(container_id, None)

    def clear(self) -> None:
        self._by_id.clear()

    def in_pool(self, pool: str) -> list[Allocation]:
        return [a for a in self._by_id.values() if a.pool == pool]

    def exclusive_cpus(self) -> CpuSet:
        return CpuSet.union_all(a.exclusive for a in self._by_id.values())
