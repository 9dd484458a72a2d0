"""What the resource manager knows about pods and containers, independent of the wire format.

The NRI layer converts runtime messages into these values; policies read them and answer
with adjustments and updates. Keeping them apart from the generated protobuf classes lets
policies (and their tests) stay free of transport details.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum

import attrs


class ContainerState(Enum):
    UNKNOWN = 0
    CREATED = 1
    PAUSED = 2
    RUNNING = 3
    STOPPED = 4


@attrs.frozen
class Resources:
    """The Linux resources of a container (the subset policies read or set)."""

    cpu_shares: int | None = None
    cpu_quota: int | None = None
    cpu_period: int | None = None
    cpuset_cpus: str | None = None
    cpuset_mems: str | None = None
    memory_limit: int | None = None


@attrs.frozen
class Pod:
    id: str
    name: str
    namespace: str
    uid: str = ""
    labels: Mapping[str, str] = attrs.field(factory=dict)
    annotations: Mapping[str, str] = attrs.field(factory=dict)
    cgroup_parent: str = ""
    # Pod-level resources (the sum of the containers' requests) as the runtime reports them.
    resources: Resources | None = None


@attrs.frozen
class Container:
    id: str
    pod_id: str
    name: str
    state: ContainerState = ContainerState.UNKNOWN
    labels: Mapping[str, str] = attrs.field(factory=dict)
    annotations: Mapping[str, str] = attrs.field(factory=dict)
    resources: Resources | None = None
    pid: int = 0


@attrs.frozen
class Adjustment:
    """Changes a policy asks for on a container being created.

    ``None`` means "leave as the runtime has it". Only these fields are carried on the wire.
    """

    cpuset_cpus: str | None = None
    cpuset_mems: str | None = None
    cpu_shares: int | None = None
    cpu_quota: int | None = None
    cpu_period: int | None = None
    memory_limit: int | None = None

    def is_empty(self) -> bool:
        return all(v is None for v in attrs.astuple(self))


@attrs.frozen
class Update:
    """A change to an existing container, sent to the runtime as a ContainerUpdate."""

    container_id: str
    adjustment: Adjustment
    ignore_failure: bool = False


@attrs.frozen
class Device:
    """A device a policy offers through DRA (published in the node's ResourceSlice)."""

    name: str
    attributes: Mapping[str, str | int | bool] = attrs.field(factory=dict)


@attrs.frozen
class ClaimResult:
    """The policy's answer for one prepared resource claim."""

    claim_uid: str
    devices: tuple[str, ...] = ()
    error: str | None = None
