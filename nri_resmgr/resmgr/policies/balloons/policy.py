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
from nri_resmgr.resmgr.cpuset import CpuSet
from nri_resmgr.resmgr.exports import PolicyGauge, TopologyZone
from nri_resmgr.resmgr.model import Adjustment, Container, ContainerState, Pod, Resources, Update
from nri_resmgr.resmgr.policies.balloons import exports
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
        if not state.of_type(reserved_type):
            taken = CpuSet.union_all(b.cpus for b in state.balloons)
            state.create(reserved_type, cpus=state.reserved - taken)
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
        lives = []
        for a in self.state.members:
            pod, c = self.pods.get(a.pod_id), self.containers.get(a.container_id)
            if pod is not None and c is not None:
                lives.append(self._live(matcher, pod, c, a.cpus, a.mems))
        old = self._state, self._matcher
        self._state, self._matcher = state, matcher
        try:
            return self._restore(lives)
        except ConfigError:
            self._state, self._matcher = old
            raise

    # -- synchronization ------------------------------------------------------------------

    def synchronize(self, pods: Sequence[Pod], containers: Sequence[Container]) -> list[Update]:
        self.pods = {p.id: p for p in pods}
        self.containers = {}
        lives = []
        for c in containers:
            pod = self.pods.get(c.pod_id)
            if pod is None or c.state is ContainerState.STOPPED or _preserved(pod, c):
                continue
            self.containers[c.id] = c
            res = c.resources or Resources()
            cpus, mems = reported_cpuset(res.cpuset_cpus, c), reported_cpuset(res.cpuset_mems, c)
            lives.append(self._live(self.matcher, pod, c, cpus, mems))
        # Start from empty balloons: the running containers say where the balloons are.
        self._state, _ = self._build(self.state.spec)
        updates = self._restore(lives)
        log.info("synchronized %d containers, %d updates", len(lives), len(updates))
        return updates

    def _restore(self, lives: list[Live]) -> list[Update]:
        state = self.state
        leftovers = rebuild(state, lives)
        self._create_min_balloons(state)
        for live in leftovers:
            log.info("%s: cpuset %s matches no balloon; placing afresh", live.name, live.cpus)
            self._place(live)
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
        self.pods.setdefault(pod.id, pod)
        if _preserved(pod, container):
            return Adjustment(), []
        self.containers[container.id] = container
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
        return b

    def stop_container(self, pod: Pod, container: Container) -> list[Update]:
        if self.state.leave(container.id) is None:
            return []
        return self.state.refresh()

    def remove_container(self, pod: Pod, container: Container) -> list[Update]:
        self.containers.pop(container.id, None)
        return self.stop_container(pod, container)

    # -- exports --------------------------------------------------------------------------

    def gauges(self) -> list[PolicyGauge]:
        return exports.gauges(self.state) if self._state else []

    def topology_zones(self) -> list[TopologyZone]:
        return exports.zones(self.state) if self._state else []


def _preserved(pod: Pod, c: Container) -> bool:
    return lookup_bool(pod, c, "cpu.preserve") is True


def _with_applied(a: Allocation, cpus: CpuSet | None, mems: CpuSet | None) -> Allocation:
    return attrs.evolve(a, cpus=cpus, mems=mems)
