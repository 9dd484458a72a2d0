"""Run a workload through the real daemon path: simulated runtime → NRI → manager → policy.

The simulated runtime (``nri.simulator``) plays containerd: it creates each pod sandbox,
then each container (init containers first; one that is not a sidecar is started and
stopped again, as it runs to completion), applies the policy's adjustments and every
update the policy sends for other containers, and on removal sends StopContainer before
RemoveContainer. What the runtime holds after each step is the placement reported.

A container whose creation fails is recorded as failed (the runtime would fail it) and the
run goes on; kubelet's admission check (requests against the node's capacity; allocatable
is taken to be the whole machine) rejects a pod before the runtime sees it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import attrs
import trio
import trio.testing

from nri_resmgr._gen.nri.pkg.api import v1alpha1 as api
from nri_resmgr.config import PolicyDocument, PolicySpec
from nri_resmgr.config.models import TopologyAwareSpec
from nri_resmgr.errors import ConfigError, ResmgrError
from nri_resmgr.nri import convert
from nri_resmgr.nri.errors import RpcError
from nri_resmgr.nri.service import NriService
from nri_resmgr.policies import create_policy
from nri_resmgr.policies.constraints import allowed_cpus, reserved_cpus
from nri_resmgr.resmgr.manager import ResourceManager
from nri_resmgr.resmgr.policy import PolicyEnv
from nri_resmgr.sim.connection import SimConfig
from nri_resmgr.sim.kubelet import NriPod, nri_pod, pod_amounts
from nri_resmgr.sim.machine import Machine
from nri_resmgr.sim.records import (
    ContainerRecord,
    Placement,
    SimulationResult,
    Status,
    StepRecord,
)
from nri_resmgr.sim.runtime import Simulator
from nri_resmgr.sim.workload import AddPod, ChangeConfig, RemovePods, Role, Step, Workload

__all__ = ["SimulationError", "simulate"]


class SimulationError(ResmgrError):
    """The simulated daemon stopped serving; the run cannot go on truthfully."""


# A policy decision takes milliseconds; the runtime's usual 2 s would still fail a decision
# on a machine busy with other work, and a timeout here would close the plugin mid-run.
REQUEST_TIMEOUT = 120.0


async def simulate(
    machine: Machine,
    doc: PolicyDocument,
    workload: Workload,
    workdir: Path,
    cgroup_driver: str = "cgroupfs",
) -> SimulationResult:
    """Raises ConfigError when the policy refuses the initial configuration."""
    with _captured_logs() as logs:
        manager = ResourceManager(
            create_policy(doc.policy_name), doc.spec, PolicyEnv(host_root=machine.host_root)
        )
        socket = str(workdir / "nri.sock")
        service = NriService(manager, socket, "resource-manager", "90", env={})
        config = SimConfig(request_timeout=REQUEST_TIMEOUT)
        run = _Run(manager, doc, machine, cgroup_driver, logs)
        async with Simulator.listen(socket, config) as sim, trio.open_nursery() as nursery:
            await nursery.start(service.serve)
            await sim.wait_plugin()
            startup = tuple(logs)  # what the policy said about its configuration at load
            logs.clear()
            for number, step in enumerate(workload.steps, 1):
                await run.step(sim, number, step)
            await service.stop()
    # The CPUs the configuration in force at the end sets apart, by the policies' own rules.
    spec = run.spec
    allowed = allowed_cpus(machine.system, spec.available_resources)
    # topology-aware picks a reserved quantity with the CPU allocator, balloons by id order.
    by_allocator = isinstance(spec, TopologyAwareSpec)
    reserved = reserved_cpus(machine.system, spec.reserved_resources, allowed, by_allocator)
    return SimulationResult(
        policy=doc.policy_name,
        machine=machine,
        allowed=allowed,
        reserved=reserved,
        steps=tuple(run.steps),
        containers=tuple(run.records),
        problems=workload.problems,
        notes=workload.notes,
        startup=startup,
    )


@attrs.define
class _LivePod:
    nri: NriPod
    sandbox: api.PodSandbox
    containers: list[tuple[ContainerRecord, api.Container]]


class _Run:
    def __init__(
        self,
        manager: ResourceManager,
        doc: PolicyDocument,
        machine: Machine,
        driver: str,
        logs: list[str],
    ) -> None:
        self.manager = manager
        self.policy_name = doc.policy_name
        self.spec: PolicySpec = doc.spec
        """The configuration in force."""
        self.machine = machine
        self.driver = driver
        self.logs = logs
        self.records: list[ContainerRecord] = []
        self.steps: list[StepRecord] = []
        self.pods: dict[str, _LivePod] = {}

    async def step(self, sim: Simulator, number: int, step: Step) -> None:
        messages: list[str] = []
        try:
            if isinstance(step, AddPod):
                action, target = "add", step.pod.key
                ok = await self._add(sim, number, step, messages)
            elif isinstance(step, RemovePods):
                action, target = "remove", ", ".join(step.pods)
                ok = await self._remove(sim, number, step, messages)
            else:
                action, target = "config", f"{step.doc.kind} {step.doc.name}".strip()
                ok = await self._reconfigure(step, messages)
        except RpcError as exc:
            # A pod or stop/remove event the plugin answered with an error: the runtime
            # would fail that CRI call; the rest of the step is not done.
            messages.append(f"the runtime's call failed: {exc.message}")
            ok = False
        # Updates the policy pushes on its own (UpdateContainers) travel over the socket;
        # once every task is blocked, they have all been applied. A barrier, not a sleep.
        await trio.testing.wait_all_tasks_blocked()
        if not sim.active_plugins():
            # From here on the runtime would run containers unpinned: no result is honest.
            raise SimulationError(
                f"step {number}: the simulated runtime closed the plugin connection; "
                f"{'; '.join(self.logs) or 'see the log above'}"
            )
        self._observe(sim, number)
        messages.extend(self.logs)
        self.logs.clear()
        self.steps.append(StepRecord(number, action, target, ok, tuple(messages)))

    # -- adding a pod ---------------------------------------------------------------------

    async def _add(self, sim: Simulator, number: int, step: AddPod, messages: list[str]) -> bool:
        memory = sum(n.memory for n in self.machine.system.nodes.values())
        nri = nri_pod(step.pod, self.driver, memory_capacity=memory)
        records = [
            ContainerRecord(
                pod=step.pod.key,
                container=spec.name,
                role=spec.role.value,
                qos=nri.qos.value,
                requests=spec.requests,
                limits=spec.limits,
                container_id=ctr.id,
                step=number,
            )
            for spec, ctr in nri.containers
        ]
        self.records.extend(records)
        if step.pod.reported_qos and step.pod.reported_qos.lower() != nri.qos.value:
            messages.append(
                f"{step.pod.key}: status.qosClass says {step.pod.reported_qos}, "
                f"the containers' resources make it {nri.qos.value}; simulated as the latter"
            )
        rejection = self._admission(nri)
        if rejection:
            for r in records:
                r.error = rejection
            messages.append(f"{step.pod.key}: {rejection}")
            return False
        sandbox = convert.pod_to_proto(nri.pod)
        try:
            await sim.run_pod_sandbox(sandbox)
        except RpcError as exc:
            for r in records:
                r.error = f"RunPodSandbox failed: {exc.message}"
            messages.append(f"{step.pod.key}: RunPodSandbox failed: {exc.message}")
            return False
        live = _LivePod(nri, sandbox, [])
        self.pods[step.pod.key] = live
        blocked: str | None = None
        ok = True
        for record, (spec, ctr) in zip(records, nri.containers, strict=True):
            if blocked is not None:
                record.status = Status.NOT_CREATED
                record.error = f"init container {blocked} failed"
                continue
            message = convert.container_to_proto(ctr)
            if not await self._create(sim, sandbox, message, record, number, messages):
                ok = False
                blocked = spec.name if spec.role is not Role.APP else None
                continue
            live.containers.append((record, message))
            await sim.start_container(sandbox, message)
            record.status = Status.RUNNING
            if spec.role is Role.INIT:
                await sim.stop_container(sandbox, message)
                record.status, record.ended_at = Status.EXITED, number
        return ok

    async def _create(
        self,
        sim: Simulator,
        sandbox: api.PodSandbox,
        ctr: api.Container,
        record: ContainerRecord,
        number: int,
        messages: list[str],
    ) -> bool:
        try:
            rsp = await sim.create_container(sandbox, ctr)
        except RpcError as exc:
            record.error = f"CreateContainer failed: {exc.message}"
            messages.append(f"{record.label}: {record.error}")
            # containerd undoes a failed creation towards the plugins: stop, then remove.
            await sim.stop_container(sandbox, ctr)
            await sim.remove_container(sandbox, ctr)
            return False
        cpu = rsp.adjust.linux.resources.cpu
        record.created = Placement(number, cpu.cpus, cpu.mems)
        return True

    def _admission(self, nri: NriPod) -> str | None:
        """kubelet's resource fit: the pod's requests against what earlier pods hold."""
        wanted = pod_amounts([s for s, _ in nri.containers], "requests")
        used = [
            pod_amounts([s for s, _ in p.nri.containers], "requests") for p in self.pods.values()
        ]
        capacity = {
            "cpu": len(self.machine.system.online) * 1000,
            "memory": sum(n.memory for n in self.machine.system.nodes.values()),
        }
        for field, unit in (("cpu", "m"), ("memory", " bytes")):
            request = getattr(wanted, field) or 0
            held = sum(getattr(u, field) or 0 for u in used)
            if request and capacity[field] and held + request > capacity[field]:
                return (
                    f"spec.containers[*].resources.requests.{field}: kubelet rejects the pod "
                    f"(OutOf{field}): requested {request}{unit}, used {held}{unit}, "
                    f"capacity {capacity[field]}{unit}"
                )
        return None

    # -- removing pods --------------------------------------------------------------------

    async def _remove(
        self, sim: Simulator, number: int, step: RemovePods, messages: list[str]
    ) -> bool:
        ok = True
        for key in step.pods:
            live = self.pods.pop(key, None)
            if live is None:
                messages.append(f"{step.source}: pod {key} is not running; nothing to remove")
                ok = False
                continue
            for record, ctr in reversed(live.containers):
                if record.status == Status.RUNNING:
                    await sim.stop_container(live.sandbox, ctr)
                await sim.remove_container(live.sandbox, ctr)
                if record.status == Status.RUNNING:
                    record.status, record.ended_at = Status.REMOVED, number
            await sim.stop_pod_sandbox(live.sandbox)
            await sim.remove_pod_sandbox(live.sandbox)
        return ok

    # -- configuration changes ------------------------------------------------------------

    async def _reconfigure(self, step: ChangeConfig, messages: list[str]) -> bool:
        if step.doc.policy_name != self.policy_name:
            messages.append(
                f"{step.source}: kind {step.doc.kind} is the {step.doc.policy_name} policy; "
                f"switching from {self.policy_name} needs a daemon restart (not simulated)"
            )
            return False
        try:
            await self.manager.reconfigure(step.doc.spec)
            self.spec = step.doc.spec
        except ConfigError as exc:
            messages.extend(
                f"{step.source}: refused, old configuration kept: {e}" for e in exc.errors
            )
            return False
        return True

    # -- observing the runtime ------------------------------------------------------------

    def _observe(self, sim: Simulator, number: int) -> None:
        """Record every container whose cpuset or mems (as the runtime holds them) changed."""
        for record in self.records:
            ctr = sim.containers.get(record.container_id)
            if ctr is None or (record.ended_at is not None and record.ended_at < number):
                continue
            cpu = ctr.linux.resources.cpu
            now = Placement(number, cpu.cpus, cpu.mems)
            last = record.final
            if last is None or (last.cpus, last.mems) != (now.cpus, now.mems):
                record.history.append(now)


@contextmanager
def _captured_logs() -> Iterator[list[str]]:
    """The daemon's warnings during the run, as messages for the step they belong to.

    The ttrpc server's traceback for a refused CreateContainer is left out: the failure is
    reported with the container it belongs to.
    """
    lines: list[str] = []
    logger = logging.getLogger("nri_resmgr")
    handler = _ListHandler(lines)
    saved = (logger.level, logger.propagate)
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    logger.propagate = False
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


class _ListHandler(logging.Handler):
    def __init__(self, lines: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        if record.name == "nri_resmgr.nri.ttrpc" and record.exc_info:
            return
        self.lines.append(f"{record.levelname.lower()}: {record.getMessage()}")
