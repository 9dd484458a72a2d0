"""What a simulation found: one record per container and per step, and the whole result."""

from __future__ import annotations

import attrs

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.sim.machine import Machine
from nri_resmgr.sim.workload import Amounts, Problem

__all__ = ["ContainerRecord", "Placement", "SimulationResult", "Status", "StepRecord"]


class Status:
    """A container's state at the end of the run (plain strings: they go into JSON as-is)."""

    RUNNING = "running"
    EXITED = "exited"
    """An init container that ran to completion (its placement is the one it ran with)."""
    REMOVED = "removed"
    FAILED = "failed"
    """The runtime failed its creation: the policy refused it, or kubelet rejected the pod."""
    NOT_CREATED = "not created"
    """Never created: an init container before it failed."""


@attrs.frozen
class Placement:
    step: int
    cpus: str
    """The cpuset as the runtime holds it; ``""`` is unpinned (the pod's, i.e. all CPUs)."""
    mems: str


@attrs.define
class ContainerRecord:
    pod: str
    """``namespace/name``."""
    container: str
    role: str
    qos: str
    requests: Amounts
    limits: Amounts
    container_id: str
    step: int
    """The step that created (or tried to create) it."""
    status: str = Status.FAILED
    error: str | None = None
    created: Placement | None = None
    """What the policy's CreateContainer adjustment said."""
    history: list[Placement] = attrs.Factory(list)
    """Every change of the runtime's cpuset/mems, by step (creation included)."""
    ended_at: int | None = None
    """The step that removed it (or in which it exited)."""

    @property
    def label(self) -> str:
        return f"{self.pod}/{self.container}"

    @property
    def final(self) -> Placement | None:
        return self.history[-1] if self.history else None

    @property
    def repinned(self) -> int:
        """How often other events moved it after it was created."""
        return max(len(self.history) - 1, 0)


@attrs.frozen
class StepRecord:
    number: int
    action: str
    """``add``, ``remove`` or ``config``."""
    target: str
    ok: bool
    messages: tuple[str, ...] = ()
    """Failures and the policy's warnings logged during the step."""


@attrs.frozen
class SimulationResult:
    policy: str
    machine: Machine
    allowed: CpuSet
    reserved: CpuSet
    steps: tuple[StepRecord, ...]
    containers: tuple[ContainerRecord, ...]
    problems: tuple[Problem, ...]
    """Workload documents that could not be used."""
    notes: tuple[Problem, ...] = ()
    startup: tuple[str, ...] = ()
    """Warnings of the daemon while it took the initial configuration."""

    @property
    def live(self) -> tuple[ContainerRecord, ...]:
        """The containers still running at the end."""
        return tuple(c for c in self.containers if c.status == Status.RUNNING)

    @property
    def clean(self) -> bool:
        """Nothing failed and every document was used."""
        return (
            not self.problems
            and all(s.ok for s in self.steps)
            and all(c.status != Status.FAILED for c in self.containers)
        )
