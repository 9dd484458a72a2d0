"""What the topology-aware claim state machines share (``test_grouped_state_machine.py``,
``test_per_cpu_state_machine.py``): prepared claims unprepared, containers bound to them,
native containers started and stopped, and the bound containers' invariant.

A subclass sets the attributes below in its ``@initialize`` and says what a refused native
container may say (``native_refused``) and what the scheduler forgets with a claim
(``forget``)."""

from __future__ import annotations

import itertools

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.resmgr.model import ClaimGrant, Container, Pod
from tests.dra.claim_setup import with_claim_env
from tests.policies.workload import Runtime, besteffort, burstable, guaranteed

uids = itertools.count(1)

SETTINGS = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class ClaimMachine(RuleBasedStateMachine):
    runtime: Runtime
    claims: dict[str, ClaimGrant]
    bound: dict[str, str]
    """Container id -> the claim UID it is bound to."""
    natives: list[Container]

    def native_refused(self, e: Exception) -> None:
        """Assert ``e``, a native container's refusal, is one a full node may give."""
        raise e

    def forget(self, uid: str) -> None:
        """The claim ``uid`` was unprepared: forget what the model kept of it."""

    @precondition(lambda self: self.claims)
    @rule(data=st.data())
    def unprepare(self, data: st.DataObject) -> None:
        uid = data.draw(st.sampled_from(sorted(self.claims)))
        for cid in [cid for cid, u in self.bound.items() if u == uid]:
            self.runtime.remove(self.runtime.containers[cid])
            del self.bound[cid]
        self.runtime.apply(self.runtime.policy.release_claim(uid))
        del self.claims[uid]
        self.forget(uid)

    @precondition(lambda self: self.claims)
    @rule(data=st.data())
    def start_a_claim_container(self, data: st.DataObject) -> None:
        grant = self.claims[data.draw(st.sampled_from(sorted(self.claims)))]
        pod, c = besteffort(f"app{next(uids)}")
        c = with_claim_env(c, grant.uid, str(grant.cpus), key=grant.key)
        self.runtime.create((pod, c))
        self.bound[c.id] = grant.uid

    @rule(kind=st.sampled_from(["guaranteed", "burstable", "besteffort"]),
          milli=st.integers(100, 3000))  # fmt: skip
    def start_a_native_container(self, kind: str, milli: int) -> None:
        name = f"n{next(uids)}"
        pc = {
            "guaranteed": lambda: guaranteed(name, milli // 1000 * 1000 or 1000),
            "burstable": lambda: burstable(name, milli, 2 * milli),
            "besteffort": lambda: besteffort(name),
        }[kind]()
        self.start_native(pc)

    def start_native(self, pc: tuple[Pod, Container]) -> None:
        try:
            self.natives.append(self.runtime.create(pc))
        except Exception as e:  # a full node refuses a native container; never a claim's
            self.native_refused(e)

    @precondition(lambda self: self.natives)
    @rule(data=st.data())
    def stop_a_native_container(self, data: st.DataObject) -> None:
        c = self.natives.pop(data.draw(st.integers(0, len(self.natives) - 1)))
        self.runtime.remove(c)

    @invariant()
    def bound_containers_run_on_their_claims_cpus(self) -> None:
        for cid, uid in self.bound.items():
            assert CpuSet.parse(self.runtime.cpus[cid] or "") == self.claims[uid].cpus
