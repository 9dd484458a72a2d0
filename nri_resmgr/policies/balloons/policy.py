"""balloons: containers grouped into balloons of CPUs that inflate and deflate with their
members' requests (compatible with nri-plugins' ``balloons``)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import attrs

from nri_resmgr.config.expressions import evaluate, expand
from nri_resmgr.config.models import BalloonsSpec, BalloonType, PolicySpec
from nri_resmgr.config.notapplied import report
from nri_resmgr.control import CpuFreqControl, FreqClass
from nri_resmgr.cpus.errors import PlacementError
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.errors import ConfigError
from nri_resmgr.instrumentation.exports import PolicyGauge, TopologyZone
from nri_resmgr.policies.balloons import cpuclasses, exports, fill
from nri_resmgr.policies.balloons.balloon import Balloon
from nri_resmgr.policies.balloons.claiming import ClaimsMixin
from nri_resmgr.policies.balloons.devices import close_cpus
from nri_resmgr.policies.balloons.dra import ClaimBalloons
from nri_resmgr.policies.balloons.keys import (
    NOT_APPLIED,
    NOT_APPLIED_CONSTRAINTS,
)
from nri_resmgr.policies.balloons.loading import (
    check_memory_types,
    report_class_keys,
    reserved_type,
)
from nri_resmgr.policies.balloons.preferences import BalloonPreferences, preferences_of
from nri_resmgr.policies.balloons.restore import Live, rebuild
from nri_resmgr.policies.balloons.state import Balloons
from nri_resmgr.policies.balloons.types import (
    DEFAULT,
    BalloonsError,
    Matcher,
    balloon_types,
)
from nri_resmgr.policies.constraints import allowed_cpus, reserved_cpus
from nri_resmgr.policies.hardware import HardwarePolicy, reported_cpuset
from nri_resmgr.policies.requests import container_request, milli_cpu_to_shares
from nri_resmgr.policies.subject import container_subject
from nri_resmgr.resmgr.model import (
    Adjustment,
    Container,
    ContainerState,
    Device,
    Pod,
    Resources,
    Update,
)
from nri_resmgr.resmgr.policy import ClaimError, PolicyEnv
from nri_resmgr.shorten import shorten
from nri_resmgr.sysfs import MemoryType, System
from nri_resmgr.sysfs.caches import shared_caches

log = logging.getLogger(__name__)


class BalloonsPolicy(ClaimsMixin, HardwarePolicy):
    name = "balloons"

    def __init__(self, system: System | None = None) -> None:
        super().__init__(system)
        self._state: Balloons | None = None
        self._matcher: Matcher | None = None
        self._cpufreq: CpuFreqControl | None = None
        self._classes: dict[str, FreqClass] = {}
        self._claims = ClaimBalloons()
        self._published: list[Device] | None = None
        """The devices as last announced (``devices_changed``), to call it only on change."""

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
        fill.create_min_balloons(self._state, self.matcher.types)
        self._classes = cpuclasses.freq_classes(self._state.spec)
        self._after_decision()

    def _control(self) -> None:
        """The CPU-class control step, after every decision: frequency files follow the
        balloons' CPUs (nothing is touched while no class is defined or used)."""
        if self._cpufreq is None:
            if not self._classes:
                return
            self._cpufreq = CpuFreqControl(self.env.host_root, self.system)
        self._cpufreq.apply(*cpuclasses.assignments(self.state, self._classes))

    def _build(self, spec: PolicySpec) -> tuple[Balloons, Matcher]:
        if not isinstance(spec, BalloonsSpec):
            raise ConfigError(
                f"spec: balloons needs a BalloonsPolicy spec, got {type(spec).__name__}"
            )
        check_memory_types(spec)
        self._check_cpu_classes_writable(spec)
        types = balloon_types(spec)
        report(spec, (*NOT_APPLIED, *NOT_APPLIED_CONSTRAINTS))
        report_class_keys(spec)
        allowed = allowed_cpus(self.system, spec.available_resources)
        reserved = reserved_cpus(self.system, spec.reserved_resources, allowed)
        types, reserved = reserved_type(spec, types, reserved)
        matcher = Matcher(tuple(types), spec.reserved_pool_namespaces)
        devices = {}
        for d in {d for t in types for d in t.prefer_close_to_devices}:
            cpus = close_cpus(self.system, self.env.host_root, d)
            if cpus is not None:
                devices[d] = cpus
        l2 = shared_caches(self.system, 2)
        state = Balloons(self.system, spec, allowed, reserved, devices, tuple(types), l2)
        return state, matcher

    def _check_cpu_classes_writable(self, spec: BalloonsSpec) -> None:
        """CPU classes over a read-only /sys (the charts' /host/sys unless classes are set in
        their values) could never be applied: refused, rather than accepted and inert."""
        classes = cpuclasses.used(spec)
        if not classes:
            return
        control = self._cpufreq or CpuFreqControl(self.env.host_root, self.system)
        problem = control.read_only(classes)
        if problem:
            raise ConfigError(
                f"spec.control.cpu.classes: {problem}, so CPU classes "
                f"({', '.join(c.name for c in classes)}) could never be applied; mount it "
                "writable (the charts do when config.control.cpu.classes is set) or remove "
                "the classes"
            )

    def reconfigure(self, spec: PolicySpec) -> list[Update]:
        state, matcher = self._build(spec)
        try:
            self._claims.install(state)
        except ClaimError as e:
            raise ConfigError(f"spec.balloonTypes: {e} (unprepare the claim first)") from e
        lives = []
        held: dict[str, tuple[CpuSet | None, CpuSet | None]] = {}
        for a in self.state.members:
            pod, c = a.pod, a.container
            if pod is not None and c is not None:
                live = self._live(matcher, pod, c, a.cpus, a.mems, running=True)
                held[c.id] = (a.cpus, a.mems)
                if live.type.name != a.pool.rsplit("[", 1)[0]:
                    # Its type changed: placed afresh (as upstream re-allocates), rather
                    # than kept on its CPUs in a new instance of the new type. The runtime
                    # still holds the old cpuset until an update says otherwise.
                    live = attrs.evolve(live, cpus=None, mems=None)
                lives.append(live)
        old = self._state, self._matcher
        self._state, self._matcher = state, matcher
        try:
            updates = self._restore(lives, strict=True, held=held)
        except ConfigError:
            self._state, self._matcher = old
            raise
        self._classes = cpuclasses.freq_classes(state.spec)
        self._after_decision()
        return updates

    # -- synchronization ------------------------------------------------------------------

    def synchronize(self, pods: Sequence[Pod], containers: Sequence[Container]) -> list[Update]:
        by_id = {p.id: p for p in pods}
        lives = []
        for c in containers:
            pod = by_id.get(c.pod_id)
            if pod is None or c.state is ContainerState.STOPPED or self._preserved(pod, c):
                continue
            res = c.resources or Resources()
            cpus, mems = reported_cpuset(res.cpuset_cpus, c), reported_cpuset(res.cpuset_mems, c)
            lives.append(self._live(self.matcher, pod, c, cpus, mems, running=True))
        # Start from empty balloons: the running containers say where the balloons are.
        self._state, _ = self._build(self.state.spec)
        try:
            self._claims.install(self._state)
        except ClaimError as e:  # the configuration is the one the claims were checked in
            log.error("DRA claims' balloons not rebuilt: %s", e)
        updates = self._restore(lives)
        self._after_decision()
        log.info("synchronized %d containers, %d updates", len(lives), len(updates))
        return updates

    def _restore(
        self,
        lives: list[Live],
        strict: bool = False,
        held: dict[str, tuple[CpuSet | None, CpuSet | None]] | None = None,
    ) -> list[Update]:
        """Rebuild the balloons from ``lives``, in container-id order so that the result does
        not depend on how they are listed. A container that cannot be placed refuses a
        reconfiguration (``strict``) or, in Synchronize, is logged and left as it is.
        ``held``: what the runtime holds per container, where it is not the live's cpuset."""
        state = self.state
        lives = sorted(lives, key=lambda live: live.container.id)
        # A claim's containers go to its balloon, whatever type they would match.
        joined = [(live, self._join_claim(live)) for live in lives]
        unbound = [live for live, b in joined if b is None]
        lives = [live if b is None else attrs.evolve(live, type=b.type) for live, b in joined]
        leftovers = rebuild(state, unbound, self.matcher.by_name(DEFAULT))
        fill.create_min_balloons(state, self.matcher.types, strict)
        # Containers that held CPUs were placed before the ones the runtime reports
        # unpinned (pinCPU off, or never pinned): placing those first could take the CPUs
        # the others had and leave one of them unplaceable.
        leftovers.sort(key=lambda live: (not live.cpus, live.container.id))
        for live in leftovers:
            log.info("%s: cpuset %s matches no balloon; placing afresh", live.name, live.cpus)
            try:
                self._place(live)
            except (BalloonsError, PlacementError) as e:
                if strict:
                    raise ConfigError(f"spec: cannot place every container: {e}") from e
                # It runs already: leave it where it is rather than fail the whole sync.
                log.error("%s: %s; left as the runtime has it", live.name, e)
        for b in state.balloons:
            state.fit(b)
        for live in lives:
            cid = live.container.id
            if cid in state.members:
                self._remember_settings(live)
                cpus, mems = (held or {}).get(cid, (live.cpus, live.mems))
                state.hold(cid, cpus, mems)
        return state.refresh()

    def _live(
        self,
        matcher: Matcher,
        pod: Pod,
        c: Container,
        cpus: CpuSet | None,
        mems: CpuSet | None,
        running: bool = False,
    ) -> Live:
        request = container_request(pod, c).cpu_request
        if not running:
            return Live(pod, c, matcher.type_for(pod, c), request, cpus, mems)
        try:
            t = matcher.type_for(pod, c)
        except BalloonsError as e:
            # A running container: a configuration change must not fail it after the fact.
            log.warning("%s/%s/%s: %s; using the default type", pod.namespace, pod.name, c.name, e)
            t = matcher.by_name(DEFAULT)  # type: ignore[assignment]
            assert t is not None
        return Live(pod, c, t, request, cpus, mems)

    # -- lifecycle ------------------------------------------------------------------------

    def create_container(self, pod: Pod, container: Container) -> tuple[Adjustment, list[Update]]:
        if self._preserved(pod, container):
            return Adjustment(), []
        state = self.state
        state.leave(container.id)
        live = self._claim_live(pod, container)
        b = self._join_claim(live) or self._place(
            self._live(self.matcher, pod, container, None, None)
        )
        res = container.resources or Resources()
        cpus, mems = state.desired(
            b, state.free(), container.id, reported_cpuset(res.cpuset_mems, container)
        )
        state.hold(container.id, cpus, mems)
        log.info("%s: balloon %s: cpus %s mems %s", live.name, b.name, cpus, mems)
        adjustment = Adjustment(
            cpuset_cpus=None if cpus is None else str(cpus),
            cpuset_mems=None if mems is None else str(mems),
            cpu_shares=milli_cpu_to_shares(live.request),
        )
        updates = state.refresh(skip=container.id)
        self._after_decision()
        return adjustment, updates

    def _place(self, live: Live) -> Balloon:
        """Put ``live`` in a balloon of its type; raise BalloonsError if none can take it
        (upstream fails the container then, rather than using another type)."""
        state = self.state
        ns = live.pod.namespace
        group = self._group(live)
        b = fill.choose(state, live.type, live.pod.id, ns, live.request, group)
        if b is None:
            raise BalloonsError(
                f"balloon allocation for container {live.name} failed: no suitable balloon "
                f"instance available (type {live.type.name!r}, request {live.request} mCPU)"
            )
        cid = live.container.id
        self._remember_settings(live)
        state.join(b, live.allocation(), ns, group=group)
        if not b.cpus:
            # Never pinned to nothing: the creation fails, naming the shortage.
            state.leave(cid)
            raise PlacementError(
                f"{live.name}: balloon {b.name} has no CPU and none is free "
                f"({live.request} mCPU requested)"
            )
        return b

    def _remember_settings(self, live: Live) -> None:
        """The container's own annotations that shape its cpuset (also after a restore)."""
        state, cid = self.state, live.container.id
        prefs = preferences_of(live.pod, live.container)
        if _hide_hyperthreads(prefs, live.type):
            state.no_ht.add(cid)
        if prefs.keep_mems:
            state.keep_mems.add(cid)
        types = _memory_type_annotation(prefs, live)
        if types:
            state.mem_types[cid] = types

    def _group(self, live: Live) -> str | None:
        if not live.type.group_by:
            return None
        try:
            return expand(live.type.group_by, container_subject(live.pod, live.container))
        except KeyError as e:
            log.error("%s: groupBy of balloon type %r: %s", live.name, live.type.name, e)
            return None

    def _preserved(self, pod: Pod, c: Container) -> bool:
        if preferences_of(pod, c).cpu_preserve:
            return True
        rules = self.state.spec.preserve
        if rules is None:
            return False
        subject = container_subject(pod, c)
        return any(evaluate(e, subject) for e in rules.match_expressions)

    def stop_container(self, pod: Pod, container: Container) -> list[Update]:
        if self.state.leave(container.id) is None:
            return []
        updates = self.state.refresh()
        self._after_decision()
        return updates

    def remove_container(self, pod: Pod, container: Container) -> list[Update]:
        self._claims.forget(container.id)
        return self.stop_container(pod, container)

    def updates_failed(self, container_ids: Sequence[str]) -> None:
        # What those containers hold is unknown now: the next refresh sends it again.
        for cid in container_ids:
            self.state.hold(cid, None, None)

    def retry_updates(self, container_ids: Sequence[str]) -> list[Update]:
        # updates_failed left their sets unknown: refresh sends what their balloons want now.
        return self.state.refresh()

    # -- exports --------------------------------------------------------------------------

    def gauges(self) -> list[PolicyGauge]:
        return exports.gauges(self.state) if self._state else []

    def topology_zones(self) -> list[TopologyZone]:
        return exports.zones(self.state) if self._state else []


def _hide_hyperthreads(prefs: BalloonPreferences, t: BalloonType) -> bool:
    """The hide-hyperthreads annotation, else the balloon type's hideHyperthreads."""
    value = prefs.hide_hyperthreads
    return value if value is not None else bool(t.hide_hyperthreads)


def _memory_type_annotation(prefs: BalloonPreferences, live: Live) -> MemoryType | None:
    """The container's memory-type annotation (as upstream, it overrides the balloon's
    memoryTypes); an unknown type is logged and ignored."""
    value = prefs.memory_type
    if value is None or not value.strip():
        return None
    try:
        return MemoryType.parse(value)
    except ValueError as e:
        log.error("%s: ignoring annotation memory-type: %s", live.name, shorten(str(e)))
        return None
