"""Stateful property test of placement (issue 12): random machines, random configurations and
random operation sequences for topology-aware and balloons, with the invariants checked after
every step on what the *runtime* holds (the in-repo ``Runtime``, which drops an empty cpuset
as the wire does).

Invariants (containers that are running and not ``cpu.preserve``d, while pinCPU is on):

1. every container has a non-empty cpuset within the allowed CPUs;
2. exclusive CPUs (topology-aware grants, balloons' own CPUs) are in no other container's set;
3. reserved CPUs are used only by reserved-class containers (reserved/kube-system);
4. with pinMemory on, mems cover the NUMA nodes (with memory) of the cpus;
5. the policy's view of every container's cpuset and mems is what the runtime holds, and
   the policy tracks exactly the running containers it placed;
6. after a restart (Synchronize from the runtime's state) every container keeps its placement;
7. Synchronize of the same state in a shuffled order gives the same updates and grants.

Budget: ``NRI_RESMGR_STATEMACHINE_EXAMPLES`` (default 30) examples of up to
``NRI_RESMGR_STATEMACHINE_STEPS`` (default 25) steps; ``nox -s statemachine`` runs more.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from pathlib import Path

import attrs
import hypothesis.strategies as st
from hypothesis import HealthCheck, Phase, assume, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from nri_resmgr.config.models import BalloonType, PolicySpec
from nri_resmgr.cpus.errors import PlacementError
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.errors import ConfigError
from nri_resmgr.policies.allocations import Allocation, Kind
from nri_resmgr.policies.balloons import BalloonsPolicy
from nri_resmgr.policies.hardware import HardwarePolicy
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from nri_resmgr.resmgr.model import Container, ContainerState, Resources
from nri_resmgr.resmgr.policy import PolicyEnv
from nri_resmgr.sysfs import System
from tests.policies.workload import (
    Runtime,
    balloons_spec,
    container,
    pod,
    resources,
    topology_spec,
)
from tests.sysfs.fakesys import Layout, write_sysfs

P = "resource-policy.nri.io"
EXAMPLES = int(os.environ.get("NRI_RESMGR_STATEMACHINE_EXAMPLES", "30"))
STEPS = int(os.environ.get("NRI_RESMGR_STATEMACHINE_STEPS", "25"))
REPORT = bool(os.environ.get("NRI_RESMGR_STATEMACHINE_REPORT"))


# -- machines and configurations --------------------------------------------------------------


@st.composite
def layouts(draw: st.DrawFn) -> Layout:
    packages = draw(st.integers(1, 4))
    dies = draw(st.integers(1, 2)) if packages <= 2 else 1
    nodes_per_die = draw(st.integers(1, 8 // (packages * dies)))
    cores = draw(st.integers(1, 3))
    threads = draw(st.sampled_from([1, 2]))
    count = packages * dies * nodes_per_die * cores * threads
    if count < 2:
        cores, count = 2, count * 2
    ids: tuple[int, ...] = ()
    if draw(st.booleans()):  # sparse CPU ids
        picked = draw(st.sets(st.integers(0, 4 * count + 8), min_size=count, max_size=count))
        ids = tuple(sorted(picked))
    all_ids = ids or tuple(range(count))
    isolated = draw(st.sets(st.sampled_from(all_ids), max_size=count // 4))
    return Layout(
        packages=packages,
        dies=dies,
        nodes_per_die=nodes_per_die,
        cores_per_node=cores,
        threads=threads,
        isolated=str(CpuSet(isolated)),
        cpu_ids=ids,
    )


def _cpu_choice(system: System) -> st.SearchStrategy[int]:
    return st.sampled_from(sorted(system.cpus))


@st.composite
def specs(draw: st.DrawFn, policy: str, system: System) -> PolicySpec:
    cpus = sorted(system.cpus)
    reserved = draw(
        st.one_of(
            st.sampled_from(["750m", "1"] + (["2"] if len(cpus) >= 4 else [])),
            _cpu_choice(system).map(lambda c: f"cpuset:{c}"),
        )
    )
    available = draw(st.one_of(st.none(), _cpu_choice(system).map(lambda c: f"exclude-cpuset:{c}")))
    pins = {"pin_cpu": draw(st.booleans()), "pin_memory": draw(st.booleans())}
    if policy == "topology-aware":
        return topology_spec(
            reserved,
            available,
            prefer_isolated_cpus=draw(st.booleans()),
            prefer_shared_cpus=draw(st.booleans()),
            reserved_pool_namespaces=("mon*",),
            **pins,
        )
    app = BalloonType(
        name="app",
        namespaces=("app",),
        min_cpus=draw(st.integers(0, 1)),
        max_cpus=draw(st.integers(0, 3)),
        prefer_new_balloons=draw(st.booleans()),
    )
    return balloons_spec(reserved, available, balloon_types=(app,), **pins)


# -- workloads -----------------------------------------------------------------------------------

QOS = ("guaranteed", "burstable", "besteffort")
MILLIS = (250, 500, 1000, 1500, 2000, 2500, 3000)
NAMESPACES = ("default", "kube-system", "app", "mon-a")
ANNOTATIONS = (
    {},
    {f"prefer-shared-cpus.{P}": "true"},
    {f"prefer-shared-cpus.{P}": "false"},
    {f"prefer-isolated-cpus.{P}": "true"},
    {f"prefer-reserved-cpus.{P}": "true"},
    {f"prefer-reserved-cpus.{P}/pod": "false"},
    {f"cpu.preserve.{P}": "true"},
    {f"memory.preserve.{P}": "true"},
    {f"balloon.balloons.{P}": "app"},
)


def _resources_for(qos: str, milli: int, limit_factor: int) -> Resources:
    if qos == "guaranteed":
        return resources(milli, milli)
    if qos == "burstable":
        return resources(milli, None if limit_factor == 0 else milli * limit_factor)
    return resources(0, None)


@attrs.define
class Node:
    """The simulated runtime and what it knows about each container's QoS class."""

    runtime: Runtime
    qos: dict[str, str] = attrs.field(factory=dict)
    stopped: set[str] = attrs.field(factory=set)


class PlacementMachine(RuleBasedStateMachine):
    policy_name = "topology-aware"

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="nri-resmgr-sm-"))
        self.system: System
        self.spec: PolicySpec
        self.node: Node
        self.serial = 0
        self.steps = 0

    def teardown(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        if REPORT:
            # One line per example, for counting what a run covered (steps = rules run).
            print(f"state-machine {self.policy_name}: {self.steps} steps")

    # -- set-up -----------------------------------------------------------------------------

    def _new_policy(self) -> HardwarePolicy:
        policy = TopologyAwarePolicy() if self.policy_name == "topology-aware" else BalloonsPolicy()
        policy.setup(self.spec, PolicyEnv(host_root=str(self.root)))
        return policy

    @initialize(layout=layouts(), data=st.data())
    def start(self, layout: Layout, data: st.DataObject) -> None:
        write_sysfs(self.root, layout)
        from nri_resmgr.sysfs import discover

        self.system = discover(str(self.root))
        self.spec = data.draw(specs(self.policy_name, self.system))
        try:
            policy = self._new_policy()
        except ConfigError:
            assume(False)
        self.node = Node(Runtime(policy))

    @property
    def policy(self) -> HardwarePolicy:
        p = self.node.runtime.policy
        assert isinstance(p, HardwarePolicy)
        return p

    def running(self) -> list[Container]:
        return [c for c in self.node.runtime.containers.values() if c.id not in self.node.stopped]

    # -- operations -------------------------------------------------------------------------

    @rule(
        qos=st.sampled_from(QOS),
        milli=st.sampled_from(MILLIS),
        limit_factor=st.integers(0, 2),
        namespace=st.sampled_from(NAMESPACES),
        annotations=st.sampled_from(ANNOTATIONS),
    )
    def create(
        self, qos: str, milli: int, limit_factor: int, namespace: str, annotations: dict[str, str]
    ) -> None:
        self.serial += 1
        p = pod(f"p{self.serial}", qos, namespace, annotations)
        c = container(p, "c0")
        c = attrs.evolve(c, resources=_resources_for(qos, milli, limit_factor))
        try:
            self.node.runtime.create((p, c))
        except PlacementError as e:
            # Refused outright, with the container named; never placed with an empty cpuset.
            assert f"{namespace}/{p.name}/c0" in str(e)
            assert self._allocation(c.id) is None
            return
        self.node.qos[c.id] = qos

    @precondition(lambda self: bool(self.running()))
    @rule(data=st.data(), milli=st.sampled_from(MILLIS), limit_factor=st.integers(0, 2))
    def update(self, data: st.DataObject, milli: int, limit_factor: int) -> None:
        if self.policy_name == "balloons":
            # balloons does not act on UpdateContainer yet (its request stays as created),
            # so a restart would legitimately resize: left to the balloons parity work.
            return
        c = data.draw(st.sampled_from(self.running()))
        new = _resources_for(self.node.qos[c.id], milli, limit_factor)
        rt = self.node.runtime
        try:
            updates = self.policy.update_container(rt.pods[c.pod_id], c, new)
        except PlacementError:
            return
        rt.containers[c.id] = attrs.evolve(c, resources=new)
        rt.apply(updates)

    @precondition(lambda self: bool(self.running()))
    @rule(data=st.data())
    def stop(self, data: st.DataObject) -> None:
        c = data.draw(st.sampled_from(self.running()))
        rt = self.node.runtime
        rt.apply(self.policy.stop_container(rt.pods[c.pod_id], c))
        rt.containers[c.id] = attrs.evolve(c, state=ContainerState.STOPPED)
        self.node.stopped.add(c.id)

    @precondition(lambda self: bool(self.node.runtime.containers))
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        c = data.draw(st.sampled_from(sorted(self.node.runtime.containers.values(), key=_id)))
        self.node.runtime.remove(c)
        self.node.stopped.discard(c.id)
        self.node.qos.pop(c.id, None)

    @rule(data=st.data())
    def reconfigure(self, data: st.DataObject) -> None:
        spec = data.draw(specs(self.policy_name, self.system))
        try:
            updates = self.policy.reconfigure(spec)
        except ConfigError:
            return  # refused: the old configuration stays (the invariants check it)
        self.spec = spec
        self.node.runtime.apply(updates)

    @rule(seed=st.integers(0, 2**16))
    def restart(self, seed: int) -> None:
        rt = self.node.runtime
        before = {c.id: rt.placement(c) for c in self.running() if self._pinned(c)}
        pods, containers = rt.reported()
        fresh = self._new_policy()
        updates = fresh.synchronize(pods, containers)
        # 7. the same state listed in another order is placed the same way.
        shuffled = list(containers)
        random.Random(seed).shuffle(shuffled)
        other = self._new_policy()
        assert sorted(map(str, other.synchronize(pods, shuffled))) == sorted(map(str, updates))
        assert _grants(other) == _grants(fresh)
        rt.policy = fresh
        rt.apply(updates)
        if not getattr(self.spec, "pin_cpu", True):
            # Known gap: without pinned cpus a restart cannot tell a container's pool from its
            # mems alone, so unpinned containers may be given other memory nodes.
            return
        # 6. every container keeps its placement.
        after = {c.id: rt.placement(c) for c in self.running() if self._pinned(c)}
        assert after == before, updates

    # -- invariants -------------------------------------------------------------------------

    def _allocation(self, cid: str) -> Allocation | None:
        p = self.policy
        if isinstance(p, TopologyAwarePolicy):
            return p.engine.allocation(cid)
        assert isinstance(p, BalloonsPolicy)
        return p.state.members.get(cid)

    def _pinned(self, c: Container) -> bool:
        a = self._allocation(c.id)
        return a is not None and a.kind is not Kind.PRESERVE

    def _allowed_reserved(self) -> tuple[CpuSet, CpuSet]:
        p = self.policy
        if isinstance(p, TopologyAwarePolicy):
            return p.engine.allowed, p.engine.reserved
        assert isinstance(p, BalloonsPolicy)
        return p.state.allowed, p.state.reserved

    def _is_reserved_class(self, a: Allocation) -> bool:
        return a.kind is Kind.RESERVED

    def _same_group(self, a: Allocation, other: str) -> bool:
        """Whether ``other`` may share ``a``'s own CPUs (members of one balloon do)."""
        return False

    @invariant()
    def placement_holds_on_the_runtime(self) -> None:
        if not hasattr(self, "node"):
            return
        self.steps += 1
        rt = self.node.runtime
        allowed, reserved = self._allowed_reserved()
        pin_cpu = bool(getattr(self.spec, "pin_cpu", True))
        pin_memory = bool(getattr(self.spec, "pin_memory", True))
        cpus_of = {cid: CpuSet.parse(text or "") for cid, text in rt.cpus.items()}
        placed = set()
        for c in self.running():
            a = self._allocation(c.id)
            if a is None:
                continue  # cpu.preserve in balloons: not the policy's
            placed.add(c.id)
            # 5. the policy's view is what the runtime holds.
            held = (rt.cpus[c.id], rt.mems[c.id])
            assert (a.cpus, a.mems) == tuple(
                None if v is None else CpuSet.parse(v) for v in held
            ), (a.name, held)
            if a.kind is Kind.PRESERVE or not pin_cpu:
                continue
            cpus = cpus_of[c.id]
            # 1. pinned, inside the allowed CPUs.
            assert cpus, f"{a.name} is unpinned"
            assert cpus.issubset(allowed), (a.name, cpus, allowed)
            # 2. exclusive CPUs are nobody else's.
            own = self._own_cpus(a)
            for other, theirs in cpus_of.items():
                if other == c.id or other in self.node.stopped or self._same_group(a, other):
                    continue
                if other in self.node.qos or self._allocation(other) is not None:
                    assert own.isdisjoint(theirs), (a.name, own, other, theirs)
            # 3. reserved CPUs only for reserved-class containers.
            if not self._is_reserved_class(a):
                assert cpus.isdisjoint(reserved), (a.name, cpus, reserved)
            # 4. mems cover the cpus' NUMA nodes.
            if pin_memory and not a.keep_mems and rt.mems[c.id] is not None:
                mems = CpuSet.parse(rt.mems[c.id] or "")
                nodes = {n for n in self.system.nodes_of(cpus) if self.system.nodes[n].memory}
                assert nodes.issubset(mems.ids()), (a.name, cpus, mems)
        tracked = {a.container_id for a in self._allocations()}
        assert tracked == placed, (tracked, placed)

    def _allocations(self) -> list[Allocation]:
        p = self.policy
        if isinstance(p, TopologyAwarePolicy):
            return p.engine.allocations()
        assert isinstance(p, BalloonsPolicy)
        return list(p.state.members)

    def _own_cpus(self, a: Allocation) -> CpuSet:
        p = self.policy
        if isinstance(p, TopologyAwarePolicy):
            return a.exclusive
        assert isinstance(p, BalloonsPolicy)
        b = p.state.by_name(a.pool)
        if b is None:
            return CpuSet()
        # A balloon's CPUs belong to its members only: other balloons' members never see them.
        return b.cpus if not b.type.share_idle_cpus_in_same else CpuSet()


def _id(c: Container) -> str:
    return c.id


def _grants(p: HardwarePolicy) -> list[tuple[str, str, str, str]]:
    if isinstance(p, TopologyAwarePolicy):
        return sorted(
            (a.container_id, a.pool, a.kind.value, str(a.exclusive)) for a in p.engine.allocations()
        )
    assert isinstance(p, BalloonsPolicy)
    out = []
    for a in p.state.members:
        b = p.state.by_name(a.pool)
        out.append((a.container_id, b.type.name if b else "", str(b.cpus if b else ""), ""))
    return sorted(out)


class BalloonsMachine(PlacementMachine):
    policy_name = "balloons"

    def _is_reserved_class(self, a: Allocation) -> bool:
        return a.pool.startswith("reserved[")

    def _same_group(self, a: Allocation, other: str) -> bool:
        theirs = self._allocation(other)
        return theirs is not None and theirs.pool == a.pool

    @invariant()
    def balloons_are_disjoint(self) -> None:
        if not hasattr(self, "node"):
            return
        p = self.policy
        assert isinstance(p, BalloonsPolicy)
        seen = CpuSet()
        for b in p.state.balloons:
            assert b.cpus.isdisjoint(seen), b.name
            seen = seen | b.cpus


_SETTINGS = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
)
TestTopologyAwarePlacement = PlacementMachine.TestCase
TestTopologyAwarePlacement.settings = _SETTINGS
TestBalloonsPlacement = BalloonsMachine.TestCase
TestBalloonsPlacement.settings = _SETTINGS
