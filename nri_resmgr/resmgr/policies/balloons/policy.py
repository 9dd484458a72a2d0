"""balloons: containers grouped into balloons of CPUs that inflate and deflate with their
members' requests (compatible with nri-plugins' ``balloons``)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import attrs

from nri_resmgr.config.models import BalloonsSpec, PolicySpec
from nri_resmgr.errors import ConfigError
from nri_resmgr.resmgr.annotations import lookup_bool
from nri_resmgr.resmgr.cache import Allocation
from nri_resmgr.resmgr.constraints import allowed_cpus, reserved_cpus
from nri_resmgr.resmgr.cpualloc import PlacementError
from nri_resmgr.resmgr.cpuset import CpuSet
from nri_resmgr.resmgr.model import Adjustment, Container, ContainerState, Pod, Resources, Update
from nri_resmgr.resmgr.policies.balloons.restore import Live, rebuild
from nri_resmgr.resmgr.policies.balloons.state import Balloon, Balloons
from nri_resmgr.resmgr.policies.balloons.types import (
    DEFAULT,
    RESERVED,
    Matcher,
    balloon_types,
    creation_order,
)
from nri_resmgr.resmgr.policies.hardware import HardwarePolicy, reported_cpuset
from nri_resmgr.resmgr.policy import PolicyEnv
from nri_resmgr.resmgr.requests import container_request, milli_cpu_to_shares
from nri_resmgr.sysfs import System

log = logging.getLogger(__name__)


class BalloonsPolicy(HardwarePolicy):
    name = "balloons"

    def __init__(self, system: System | None = None) -> None:
        super().__init__(system)
        self._state: Balloons | None = None
        self._matcher: Matcher | None = None

    @property
    def state(self) -> Balloons:
        if self._state is None:
            raise RuntimeError("balloons: used before setup()")
        return self._state

    @property
    def matcher(self) -> Matcher:
        if self._matcher is None:
            raise RuntimeError("balloons: used before setup()")
        return self._matcher

    # -- configuration --------------------------------------------------------------------

    def setup(self, spec: PolicySpec, env: PolicyEnv) -> None:
        super().setup(spec, env)
        self._state, self._matcher = self._build(spec)
        self._create_min_balloons(self._state)

    def _build(self, spec: PolicySpec) -> tuple[Balloons, Matcher]:
        if not isinstance(spec, BalloonsSpec):
            raise ConfigError(
                f"spec: balloons needs a BalloonsPolicy spec, got {type(spec).__name__}"
            )
        types = balloon_types(spec)
        allowed = allowed_cpus(self.system, spec.available_resources)
        reserved = reserved_cpus(self.system, spec.reserved_resources, allowed)
        matcher = Matcher(tuple(types), spec.reserved_pool_namespaces)
        return Balloons(self.system, spec, allowed, reserved), matcher

    def _create_min_balloons(self, state: Balloons) -> None:
        reserved_type = self.matcher.by_name(RESERVED)
        assert reserved_type is not None
        taken = CpuSet.union_all(b.cpus for b in state.balloons)
        restored = state.of_type(reserved_type)
        if not restored:
            state.create(reserved_type, cpus=state.reserved - taken)
        else:
            restored[0].cpus = restored[0].cpus | (state.reserved - taken)
        for t in creation_order(list(self.matcher.types)):
            while len(state.of_type(t)) < max(t.min_balloons, 1 if t.name == DEFAULT else 0):
                if state.create(t, count=t.min_cpus) is None:
                    raise ConfigError(
                        f"spec.balloonTypes: cannot create {t.min_balloons} balloons of type "
                        f"{t.name!r} with minCPUs {t.min_cpus}: only {len(state.free())} "
                        "CPUs are free"
                    )
        for b in state.balloons:
            if not b.members:
                state.fit(b)

    def reconfigure(self, spec: PolicySpec) -> list[Update]:
        state, matcher = self._build(spec)
        lives = [
            self._live(matcher, a.pod, a.container, a.cpus, a.mems)
            for a in self.state.members
            if a.pod is not None and a.container is not None
        ]
        old = self._state, self._matcher
        self._state, self._matcher = state, matcher
        try:
            return self._restore(lives, strict=True)
        except ConfigError:
            self._state, self._matcher = old
            raise

    # -- synchronization ------------------------------------------------------------------

    def synchronize(self, pods: Sequence[Pod], containers: Sequence[Container]) -> list[Update]:
        by_id = {p.id: p for p in pods}
        lives = []
        for c in containers:
            pod = by_id.get(c.pod_id)
            if pod is None or c.state is ContainerState.STOPPED or _preserved(pod, c):
                continue
            res = c.resources or Resources()
            cpus, mems = reported_cpuset(res.cpuset_cpus, c), reported_cpuset(res.cpuset_mems, c)
            lives.append(self._live(self.matcher, pod, c, cpus, mems))
        # Start from empty balloons: the running containers say where the balloons are.
        self._state, _ = self._build(self.state.spec)
        updates = self._restore(lives)
        log.info("synchronized %d containers, %d updates", len(lives), len(updates))
        return updates

    def _restore(self, lives: list[Live], strict: bool = False) -> list[Update]:
        """Rebuild the balloons from ``lives``, in container-id order so that the result does
        not depend on how they are listed. A container that cannot be placed refuses a
        reconfiguration (``strict``) or, in Synchronize, is logged and left as it is."""
        state = self.state
        lives = sorted(lives, key=lambda live: live.container.id)
        leftovers = rebuild(state, lives, self.matcher.by_name(DEFAULT))
        self._create_min_balloons(state)
        for live in leftovers:
            log.info("%s: cpuset %s matches no balloon; placing afresh", live.name, live.cpus)
            try:
                self._place(live)
            except PlacementError as e:
                if strict:
                    raise ConfigError(f"spec: cannot place every container: {e}") from e
                log.error("%s: left as the runtime has it", e)
        for b in state.balloons:
            state.fit(b)
        for live in lives:
            a = state.members.get(live.container.id)
            if a is not None:
                state.members.put(_with_applied(a, live.cpus, live.mems))
        return state.refresh()

    def _live(
        self, matcher: Matcher, pod: Pod, c: Container, cpus: CpuSet | None, mems: CpuSet | None
    ) -> Live:
        request = container_request(pod, c).cpu_request
        return Live(pod, c, matcher.type_for(pod, c), request, cpus, mems)

    # -- lifecycle ------------------------------------------------------------------------

    def create_container(self, pod: Pod, container: Container) -> tuple[Adjustment, list[Update]]:
        if _preserved(pod, container):
            return Adjustment(), []
        state = self.state
        state.leave(container.id)
        live = self._live(self.matcher, pod, container, None, None)
        b = self._place(live)
        cpus, mems = state.desired(b, state.free())
        a = state.members.get(container.id)
        assert a is not None
        state.members.put(_with_applied(a, cpus, mems))
        log.info("%s: balloon %s: cpus %s mems %s", live.name, b.name, cpus, mems)
        adjustment = Adjustment(
            cpuset_cpus=None if cpus is None else str(cpus),
            cpuset_mems=None if mems is None else str(mems),
            cpu_shares=milli_cpu_to_shares(live.request),
        )
        return adjustment, state.refresh(skip=container.id)

    def _place(self, live: Live) -> Balloon:
        state = self.state
        ns = live.pod.namespace
        b = state.choose(live.type, live.pod.id, ns, live.request)
        if b is None:
            default = self.matcher.by_name(DEFAULT)
            assert default is not None
            log.warning(
                "%s: no balloon of type %r can take %d mCPU; using the default balloon",
                live.name,
                live.type.name,
                live.request,
            )
            b = state.choose(default, live.pod.id, ns, live.request) or state.of_type(default)[0]
        state.join(b, live.allocation(), ns)
        if not b.cpus:
            # Never pinned to nothing: the creation fails, naming the shortage.
            state.leave(live.container.id)
            raise PlacementError(
                f"{live.name}: balloon {b.name} has no CPU and none is free "
                f"({live.request} mCPU requested)"
            )
        return b

    def stop_container(self, pod: Pod, container: Container) -> list[Update]:
        if self.state.leave(container.id) is None:
            return []
        return self.state.refresh()

    def remove_container(self, pod: Pod, container: Container) -> list[Update]:
        return self.stop_container(pod, container)

    def updates_failed(self, container_ids: Sequence[str]) -> None:
        # What those containers hold is unknown now: the next refresh sends it again.
        for cid in container_ids:
            a = self.state.members.get(cid)
            if a is not None:
                self.state.members.put(_with_applied(a, None, None))


def _preserved(pod: Pod, c: Container) -> bool:
    return lookup_bool(pod, c, "cpu.preserve") is True


def _with_applied(a: Allocation, cpus: CpuSet | None, mems: CpuSet | None) -> Allocation:
    return attrs.evolve(a, cpus=cpus, mems=mems)
