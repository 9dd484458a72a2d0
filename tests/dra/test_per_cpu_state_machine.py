"""Stateful property test of per-CPU claims: Prepare gives the scheduler's allocation whatever
shared containers sit in the pools it empties, and the daemon stays consistent.

The scheduler is modelled as it works with per-CPU devices: any CPU no other claim holds may
be allocated (it cannot see native containers), often a whole NUMA node's free CPUs. Prepare
(``claim_cpus``) may refuse only for the two reasons a native container gives it: CPUs held
exclusively by a container, or no shared CPU left anywhere for the shared containers (both
checked to hold when it refuses). Shared containers of a pool a claim empties move up.

Invariants after every step (and across a daemon restart, claims re-claimed first):
1. no container that is not bound to a claim runs on a claimed CPU, and none runs on none;
2. every container runs with the cpuset and memory nodes its grant implies (moved ones too);
3. a bound container runs on exactly its claim's CPUs.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import hypothesis.strategies as st
from hypothesis.stateful import initialize, invariant, rule

from nri_resmgr.config.models import DraConfig
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from nri_resmgr.resmgr.model import ClaimGrant, Container
from nri_resmgr.resmgr.policy import ClaimError, PolicyEnv
from tests.dra.claim_machine import SETTINGS, ClaimMachine, uids
from tests.policies.workload import Runtime, guaranteed, topology_spec
from tests.sysfs.fakesys import N4C16, write_sysfs

_ROOT = Path(tempfile.mkdtemp(prefix="per-cpu-sm-"))
write_sysfs(_ROOT, N4C16)
NUMA_NODES = [CpuSet.parse(s) for s in ("0-3", "4-7", "8-11", "12-15")]


class PerCpuClaims(ClaimMachine):
    @initialize()
    def start(self) -> None:
        self.spec = topology_spec(dra=DraConfig(enabled=True))
        self.policy = self._policy()
        self.runtime = Runtime(self.policy)
        self.offered = CpuSet.union_all(CpuSet(d.cpus) for d in self.policy.dra_devices())
        self.claims: dict[str, ClaimGrant] = {}
        self.bound: dict[str, str] = {}  # container id -> claim UID
        self.natives: list[Container] = []

    def _policy(self) -> TopologyAwarePolicy:
        policy = TopologyAwarePolicy()
        policy.setup(self.spec, PolicyEnv(host_root=str(_ROOT)))
        return policy

    def claimed(self) -> CpuSet:
        return CpuSet.union_all(g.cpus for g in self.claims.values())

    # -- the scheduler allocates, kubelet prepares -------------------------------------------

    @rule(data=st.data(), whole_node=st.booleans())
    def allocate_and_prepare(self, data: st.DataObject, whole_node: bool) -> None:
        free = self.offered - self.claimed()
        if whole_node:
            free = free & data.draw(st.sampled_from(NUMA_NODES))
        if not free:
            return
        cpus = CpuSet(
            data.draw(st.lists(st.sampled_from(sorted(free)), min_size=1, max_size=4, unique=True))
        )
        if whole_node:
            cpus = free
        uid = f"00000000-0000-4000-8000-{next(uids):012d}"
        grant = ClaimGrant(uid, "default", cpus, f"{uid[-12:]:0>32}", f"x/cpu={uid}")
        engine = self.policy.engine
        held = CpuSet.union_all(a.exclusive for a in engine.allocations())
        sharable = engine.supply.sharable[0]
        try:
            updates = self.policy.claim_cpus(grant)
        except ClaimError as e:
            if "held exclusively by container" in str(e):
                assert not cpus.isdisjoint(held)
            else:
                assert "and every pool above it without a shared CPU" in str(e), str(e)
                assert not (sharable - held - cpus)
            assert self.policy.claims.cpus() == {u: g.cpus for u, g in self.claims.items()}
            return
        self.runtime.apply(updates)
        self.claims[uid] = grant

    @rule(milli=st.integers(1100, 2900))
    def start_a_mixed_container(self, milli: int) -> None:
        self.start_native(guaranteed(f"m{next(uids)}", milli if milli % 1000 else 1500))

    def native_refused(self, e: Exception) -> None:
        assert "no shared CPU to run on" in str(e) or "no CPU left" in str(e), str(e)

    @rule()
    def restart(self) -> None:
        """A new daemon: the claims re-claimed from their records, then NRI Synchronize."""
        self.policy = self._policy()
        for uid in sorted(self.claims):
            assert self.policy.claim_cpus(self.claims[uid]) == []  # nothing runs yet
        self.runtime.policy = self.policy
        pods, containers = self.runtime.reported()
        self.runtime.apply(self.policy.synchronize(pods, containers))

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def only_bound_containers_run_on_claimed_cpus(self) -> None:
        claimed = self.claimed()
        for cid, text in self.runtime.cpus.items():
            assert text, cid
            if cid not in self.bound:
                assert CpuSet.parse(text).isdisjoint(claimed), (cid, text)

    @invariant()
    def every_container_runs_as_its_grant_says(self) -> None:
        engine = self.policy.engine
        for cid in self.runtime.containers:
            a = engine.allocation(cid)
            assert a is not None, cid
            cpus, mems = engine.cpusets.desired(a)
            assert (self.runtime.cpus[cid], self.runtime.mems[cid]) == (str(cpus), str(mems)), a


TestPerCpuClaims = PerCpuClaims.TestCase
TestPerCpuClaims.settings = SETTINGS
