"""topology-aware: exclusive CPUs for Guaranteed containers in the tightest fitting pool of
the hardware tree, shared CPUs for the rest, reserved CPUs for kube-system."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import attrs

from nri_resmgr.config.draswitch import dra_switch
from nri_resmgr.config.models import PolicySpec, TopologyAwareSpec
from nri_resmgr.config.notapplied import report
from nri_resmgr.cpus.errors import PlacementError
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.errors import ConfigError
from nri_resmgr.instrumentation.exports import PolicyGauge, TopologyZone
from nri_resmgr.log import info_later
from nri_resmgr.policies.allocations import Allocation, Kind
from nri_resmgr.policies.annotations import report_unread
from nri_resmgr.policies.constraints import allowed_cpus, reserved_cpus
from nri_resmgr.policies.cpu_devices import cpu_devices, group_devices
from nri_resmgr.policies.hardware import HardwarePolicy, reported_cpuset
from nri_resmgr.policies.requests import container_request
from nri_resmgr.policies.topology_aware import exports, numazones
from nri_resmgr.policies.topology_aware.claims import ClaimBook, is_claim_entry
from nri_resmgr.policies.topology_aware.engine import Engine
from nri_resmgr.policies.topology_aware.keys import NOT_APPLIED, NOT_APPLIED_ANNOTATIONS
from nri_resmgr.policies.topology_aware.live import Live
from nri_resmgr.policies.topology_aware.pools import build_pools
from nri_resmgr.policies.topology_aware.preferences import preferences_of, wanted
from nri_resmgr.policies.topology_aware.restore import restore
from nri_resmgr.resmgr.model import (
    Adjustment,
    ClaimGrant,
    Container,
    ContainerState,
    Device,
    Pod,
    Resources,
    Update,
)
from nri_resmgr.resmgr.policy import PolicyEnv
from nri_resmgr.sysfs import System

log = logging.getLogger(__name__)

_NO_RESOURCES = Resources()


class TopologyAwarePolicy(HardwarePolicy):
    name = "topology-aware"

    def __init__(self, system: System | None = None) -> None:
        super().__init__(system)
        self._engine: Engine | None = None
        self.claims = ClaimBook()
        self._devices: tuple[Engine, list[Device]] | None = None

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            raise RuntimeError("topology-aware: used before setup()")
        return self._engine

    # -- configuration --------------------------------------------------------------------

    def setup(self, spec: PolicySpec, env: PolicyEnv) -> None:
        super().setup(spec, env)
        engine = self._build(spec)
        self.claims.set_grouped(engine, self._grouped_cpus(engine, spec))
        self._engine = engine
        log.info(
            "topology-aware pools: %s", ", ".join(f"{p.name}={p.cpus}" for p in self._engine.pools)
        )

    def _build(self, spec: PolicySpec) -> Engine:
        if not isinstance(spec, TopologyAwareSpec):
            raise ConfigError(
                f"spec: topology-aware needs a TopologyAwarePolicy spec, got {type(spec).__name__}"
            )
        report(spec, NOT_APPLIED)
        allowed = allowed_cpus(self.system, spec.available_resources)
        reserved = reserved_cpus(self.system, spec.reserved_resources, allowed, by_allocator=True)
        return Engine(self.system, spec, build_pools(self.system), allowed, reserved)

    def _grouped_cpus(self, engine: Engine, spec: PolicySpec) -> CpuSet:
        """``dra.groupedCPUs`` in grouped mode (checked against what the node offers), else
        nothing. Set apart for grouped claims only with DRA on (grouped mode turns it on
        unless ``dra.enabled`` is false; the manager says the key is not applied then)."""
        if spec.dra.cpu_device_mode != "grouped" or not dra_switch(spec).on:
            return CpuSet()
        grouped = CpuSet.parse(spec.dra.grouped_cpus or "")
        offered = engine.allowed - engine.reserved
        if not grouped.issubset(offered):
            raise ConfigError(
                f"spec.dra.groupedCPUs: cpus {grouped - offered} are reserved or not allowed "
                f"(offered: {offered})"
            )
        if not offered - grouped:
            raise ConfigError(
                f"spec.dra.groupedCPUs: {grouped} leaves no CPU for native containers"
            )
        return grouped

    def reconfigure(self, spec: PolicySpec) -> list[Update]:
        """Re-place every container under ``spec``, starting from the cpusets the runtime
        holds (the engine's view follows every update sent); the old engine stays on error."""
        engine = self._build(spec)
        if self._grouped_cpus(engine, spec) != self.claims.grouped:
            raise ConfigError(
                "spec.dra: cpuDeviceMode, groupBy and groupedCPUs cannot change on a running "
                "daemon; restart nri-resmgr to apply this change"
            )
        lost = self.claims.all_cpus() - (engine.allowed - engine.reserved)
        if lost:
            raise ConfigError(
                f"spec: cpus {lost} are claimed by prepared DRA claims and would no longer be "
                "offered (reserved or not allowed); unprepare those claims first"
            )
        held = [
            a
            for a in self.engine.allocations()
            if a.pod is not None and a.container is not None and not is_claim_entry(a)
        ]
        lives = [
            self._live(engine, a.pod, a.container, a.cpus, a.mems, self._fell_back(a))
            for a in held
            if a.pod is not None
            and a.container is not None
            and a.container_id not in self.claims.bound
        ]
        try:
            updates = restore(engine, lives, strict=True, around=self.claims.entries())
        except PlacementError as e:
            raise ConfigError(
                f"spec: the new configuration cannot place every container: {e}"
            ) from e
        bound = [(a.pod, a.container) for a in held if a.container_id in self.claims.bound]
        updates = self._settle_claims(engine, updates, bound)  # type: ignore[arg-type]
        self._engine = engine
        return updates

    def _settle_claims(
        self, engine: Engine, updates: list[Update], bound: Sequence[tuple[Pod, Container]]
    ) -> list[Update]:
        """After ``restore`` (which restored every native container around the claims'
        entries, so none holds or shares a claimed or grouped CPU): the claims' containers
        bound back onto their CPUs, and one update per container."""
        if not self.claims.claims and not self.claims.grouped:
            return updates
        self.claims.bound.clear()
        for pod, c in bound:
            name = f"{pod.namespace}/{pod.name}/{c.name}"
            binding = self.claims.binding(pod, name, c)
            if binding is not None:
                self.claims.bind(engine, pod, c, name, binding)
        return merge_updates([*updates, *engine.refresh()])

    # -- synchronization ------------------------------------------------------------------

    def synchronize(self, pods: Sequence[Pod], containers: Sequence[Container]) -> list[Update]:
        by_id = {p.id: p for p in pods}
        engine = self.engine
        lives = []
        bound: list[tuple[Pod, Container]] = []
        for c in containers:
            pod = by_id.get(c.pod_id)
            if pod is None or c.state is ContainerState.STOPPED:
                continue
            if c.claims and self.claims.binding(pod, f"{pod.namespace}/{pod.name}/{c.name}", c):
                bound.append((pod, c))
                continue
            res = c.resources or _NO_RESOURCES
            # Most containers of a runtime that had no resource manager report none.
            cpus = reported_cpuset(res.cpuset_cpus, c) if res.cpuset_cpus else None
            mems = reported_cpuset(res.cpuset_mems, c) if res.cpuset_mems else None
            live = self._live(engine, pod, c, cpus, mems)
            if live.want.kind is Kind.RESERVED and cpus and cpus.isdisjoint(engine.reserved):
                live = attrs.evolve(live, fell_back=True)
            lives.append(live)
        updates = restore(engine, lives, around=self.claims.entries())
        updates = self._settle_claims(engine, updates, bound)
        log.info("synchronized %d containers, %d updates", len(lives), len(updates))
        return updates

    def _live(
        self,
        engine: Engine,
        pod: Pod,
        c: Container,
        cpus: CpuSet | None,
        mems: CpuSet | None,
        fell_back: bool = False,
    ) -> Live:
        req = container_request(pod, c)
        prefs = preferences_of(pod, c)  # the annotations, decoded once for this event
        want = wanted(prefs, pod.namespace, req, engine.spec, bool(engine.reserved))
        return Live(pod, c, want, prefs.keep_mems, cpus, mems, req, fell_back)

    def _fell_back(self, a: Allocation) -> bool:
        """Whether the current engine put ``a``'s reserved-class container on normal shared
        CPUs because the reserved ones were full. Judged by the old grant, not by the cpus:
        a new reserved set can make the old reserved CPUs shared ones."""
        if a.kind is not Kind.SHARED or a.pod is None or a.container is None:
            return False
        req = container_request(a.pod, a.container)
        old, prefs = self.engine, preferences_of(a.pod, a.container)
        want = wanted(prefs, a.pod.namespace, req, old.spec, bool(old.reserved))
        return want.kind is Kind.RESERVED

    # -- lifecycle ------------------------------------------------------------------------

    def create_container(self, pod: Pod, container: Container) -> tuple[Adjustment, list[Update]]:
        report_unread(pod, NOT_APPLIED_ANNOTATIONS)
        engine = self.engine
        engine.release(container.id)
        self.claims.unbind(container.id)
        live = self._live(engine, pod, container, None, None)
        binding = self.claims.binding(pod, live.name, container) if container.claims else None
        if binding is not None:
            a = self.claims.bind(engine, pod, container, live.name, binding)
        else:
            a = self._grant(live, verify_hints=True)
        try:
            adjustment = engine.adjustment(a)
        except PlacementError:
            engine.release(container.id)
            raise
        info_later(
            log,
            "%s: %s in %s: cpus %s mems %s",
            live.name,
            a.kind.value,
            a.pool,
            adjustment.cpuset_cpus,
            adjustment.cpuset_mems,
        )
        return adjustment, engine.refresh(skip=container.id)

    def update_container(
        self, pod: Pod, container: Container, resources: Resources
    ) -> list[Update]:
        engine = self.engine
        old = engine.allocation(container.id)
        changed = attrs.evolve(container, resources=resources)
        if old is not None and container.id in self.claims.bound:
            # A claim's container keeps exactly the claim's CPUs, whatever its request says.
            engine.rebind(old, changed)
            return []
        live = self._live(engine, pod, changed, None, None)
        if old is not None and (old.kind, old.request) == (live.want.kind, live.want.request):
            engine.rebind(old, changed)
            return []
        engine.release(container.id)
        try:
            a = self._grant(live, old.pool if old is not None else None, verify_hints=True)
            own = Update(container.id, engine.adjustment(a, old))
        except PlacementError:
            # The update fails; the container keeps what it had.
            engine.roll_back(container.id, old)
            raise
        return [own, *engine.refresh(skip=container.id)]

    def _grant(
        self,
        live: Live,
        hint: str | None = None,
        engine: Engine | None = None,
        verify_hints: bool = False,
    ) -> Allocation:
        """``verify_hints``: strict topology hints fail a new placement (create, update);
        containers re-placed while running keep running wherever they land."""
        return (engine or self.engine).grant(
            live.container.id,
            live.pod.id,
            live.name,
            live.want,
            hint,
            live.keep_mems,
            pod=live.pod,
            container=live.container,
            verify_hints=verify_hints,
        )

    def stop_container(self, pod: Pod, container: Container) -> list[Update]:
        self.claims.forget(container.id)
        if self.engine.release(container.id) is None:
            return []
        return self.engine.refresh()

    def remove_container(self, pod: Pod, container: Container) -> list[Update]:
        return self.stop_container(pod, container)

    def updates_failed(self, container_ids: Sequence[str]) -> None:
        self.engine.resend(container_ids)

    def retry_updates(self, container_ids: Sequence[str]) -> list[Update]:
        # resend left their cpusets unknown: refresh sends what they should have now.
        return self.engine.refresh()

    # -- DRA ------------------------------------------------------------------------------

    def dra_devices(self) -> list[Device]:
        # Devices depend only on the machine and the engine's offer (a new engine per
        # configuration): built once per engine, not on every Prepare and publication.
        engine = self.engine
        if self._devices is None or self._devices[0] is not engine:
            if self.claims.grouped:
                by = engine.spec.dra.group_by or "numanode"
                devices = group_devices(self.system, self.claims.grouped, by)
            else:
                devices = cpu_devices(self.system, engine.allowed - engine.reserved)
            self._devices = (engine, devices)
        return list(self._devices[1])

    def pick_claim_cpus(
        self, asks: Sequence[tuple[CpuSet, int]], claim: ClaimGrant | None = None
    ) -> CpuSet:
        return self.claims.pick(self.engine, asks)

    def claim_cpus(self, claim: ClaimGrant) -> list[Update]:
        engine = self.engine
        if self.claims.claims.get(claim.uid) == claim:
            return []
        moves = self.claims.check(engine, claim)
        self.claims.add(engine, claim)
        # The shared containers of the pools the claim empties move up.
        for name, old, new in engine.relocate(moves):
            log.info("DRA claim %s took the last shared CPUs of pool %s: container %s moved "
                     "to pool %s", claim.uid, old, name, new)  # fmt: skip
        # Containers that already run with this claim's variables (the claim re-entered
        # after a daemon restart, before or after Synchronize) move onto its CPUs.
        for a in engine.allocations():
            if a.pod is None or a.container is None or claim.uid not in a.container.claims:
                continue
            binding = self.claims.binding(a.pod, a.name, a.container)
            if binding is not None:
                self.claims.bind(engine, a.pod, a.container, a.name, binding)
        log.info("DRA claim %s: cpus %s claimed", claim.uid, claim.cpus)
        return engine.refresh()

    def release_claim(self, claim_uid: str) -> list[Update]:
        engine = self.engine
        cpus = self.claims.remove(engine, claim_uid)
        if cpus is None:
            return []
        for cid in self.claims.bound_to(claim_uid):
            # Unprepare normally comes after the pod's containers stopped; one still
            # running goes back to a native placement.
            a = engine.allocation(cid)
            self.claims.unbind(cid)
            engine.release(cid)
            if a is not None and a.pod is not None and a.container is not None:
                self._grant(self._live(engine, a.pod, a.container, None, None))
        log.info("DRA claim %s: cpus %s released", claim_uid, cpus)
        return engine.refresh()

    # -- exports --------------------------------------------------------------------------

    def gauges(self) -> list[PolicyGauge]:
        return exports.gauges(self.engine) if self._engine else []

    def topology_zones(self) -> list[TopologyZone]:
        if not self._engine:
            return []
        return exports.zones(self.engine) + numazones.numa_zones(self.engine)

    def topology_attributes(self) -> list[tuple[str, str]]:
        """The scheduler's policy attributes, when there are NUMA zones to apply them to."""
        if self._engine and numazones.numa_pools(self.engine):
            return list(numazones.POLICY_ATTRIBUTES)
        return []


def merge_updates(updates: Sequence[Update]) -> list[Update]:
    """One update per container, later fields winning (in first-seen order)."""
    merged: dict[str, Update] = {}
    for u in updates:
        old = merged.get(u.container_id)
        if old is None:
            merged[u.container_id] = u
            continue
        fields = {
            k: v if v is not None else getattr(old.adjustment, k)
            for k, v in attrs.asdict(u.adjustment).items()
        }
        merged[u.container_id] = attrs.evolve(u, adjustment=Adjustment(**fields))
    return list(merged.values())
