"""Stateful property test of balloon types as DRA devices (issue 38 item 2): claim balloons,
native balloons and the reserved CPUs never overlap, whatever native containers do, across
re-synchronizations, daemon restarts (claims restored before Synchronize, as the CPU driver
does) and reconfigurations.

The scheduler is modelled as KEP-5075 says it works, on the slice as last published: a
device's capacity minus what the claims allocated from it consume. Every allocation it could
make is prepared through the calls Prepare makes (``pick_claim_cpus`` + ``claim_cpus``) and
must succeed: nothing else runs between the publication and Prepare here, so the offer is
what Prepare can give.

Invariants after every step:
1. balloons (claims', native ones, composite ones of a published and a native type, the
   reserved one) are pairwise disjoint, and no claim holds a reserved CPU;
2. each claim's balloon is of its device's type, holds exactly its CPUs, inside the device's
   NUMA node or socket;
3. a bound container runs on exactly its claim's CPUs; no other container runs on any
   claim's CPUs (forged claim variables included);
4. the policy's claims are the ones prepared and not unprepared.
"""

from __future__ import annotations

import atexit
import itertools
import shutil
import tempfile
from pathlib import Path

import attrs
import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from nri_resmgr.config.models import BalloonComponent, BalloonType, PolicySpec
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.balloons import BalloonsPolicy
from nri_resmgr.policies.balloons.dra import balloon_of, scopes
from nri_resmgr.resmgr.model import ClaimGrant, Container
from nri_resmgr.resmgr.policy import PolicyEnv
from tests.dra.balloon_setup import FAST, NATIVE, WIDE, dra_balloons_spec
from tests.dra.claim_setup import with_claim_env
from tests.policies.workload import Runtime, besteffort, burstable, guaranteed
from tests.sysfs.fakesys import N4C16, write_sysfs

# One synthetic sysfs for every example (writing it per example would dominate the run);
# removed when the test process ends, xdist workers included.
_ROOT = Path(tempfile.mkdtemp(prefix="balloons-dra-sm-"))
atexit.register(shutil.rmtree, _ROOT, ignore_errors=True)
write_sysfs(_ROOT, N4C16)
_uids = itertools.count(1)
ANN = "balloon.balloons.resource-policy.nri.io"


class BalloonClaims(RuleBasedStateMachine):
    @initialize(reserved=st.sampled_from(["1", "cpuset:0", "cpuset:5,12"]),
                min_native=st.integers(0, 2), min_combo=st.integers(0, 1))  # fmt: skip
    def start(self, reserved: str, min_native: int, min_combo: int) -> None:
        self.reserved = reserved
        parts = (BalloonComponent("native"), BalloonComponent("fast"))
        self.combo = BalloonType(name="combo", min_balloons=min_combo, min_cpus=2, components=parts)
        self.native = attrs.evolve(NATIVE, min_balloons=min_native, min_cpus=1)
        self.spec = self._spec(self.native)
        self.policy = self._policy(self.spec)
        self.runtime = Runtime(self.policy)
        self.consumed: dict[str, dict[str, int]] = {}
        """The scheduler's view: device -> claim UID -> CPUs consumed."""
        self.claims: dict[str, ClaimGrant] = {}
        self.bound: dict[str, str] = {}  # container id -> claim UID
        self.natives: list[Container] = []

    def _spec(self, native: object) -> PolicySpec:
        return dra_balloons_spec(FAST, WIDE, native, self.combo, reserved=self.reserved)  # type: ignore[arg-type]

    def _policy(self, spec: PolicySpec) -> BalloonsPolicy:
        policy = BalloonsPolicy()
        policy.setup(spec, PolicyEnv(host_root=str(_ROOT)))
        return policy

    # -- the scheduler allocates, kubelet prepares -------------------------------------------

    @rule(data=st.data())
    def allocate_and_prepare(self, data: st.DataObject) -> None:
        published = {d.name: d for d in self.policy.dra_devices()}
        if not published:
            return
        name = data.draw(st.sampled_from(sorted(published)))
        free = published[name].capacity["cpu"] - sum(self.consumed.get(name, {}).values())
        if free <= 0:
            return  # the scheduler allocates nothing here
        count = data.draw(st.integers(1, free))
        uid = f"00000000-0000-4000-8000-{next(_uids):012d}"
        claim = ClaimGrant(uid, "default", CpuSet(), f"{uid[-12:]:0>32}", f"x/cpu={uid}",
                           grouped=True, devices=(name,))  # fmt: skip
        device_cpus = CpuSet(published[name].cpus)
        cpus = self.policy.pick_claim_cpus([(device_cpus, count)], claim)
        grant = attrs.evolve(claim, cpus=cpus)
        self.runtime.apply(self.policy.claim_cpus(grant))
        self.consumed.setdefault(name, {})[uid] = count
        self.claims[uid] = grant

    @precondition(lambda self: self.claims)
    @rule(data=st.data(), stop_first=st.booleans())
    def unprepare(self, data: st.DataObject, stop_first: bool) -> None:
        uid = data.draw(st.sampled_from(sorted(self.claims)))
        for cid in [cid for cid, u in self.bound.items() if u == uid]:
            if stop_first:
                self.runtime.remove(self.runtime.containers[cid])
            else:
                self.natives.append(self.runtime.containers[cid])  # runs on, natively now
            del self.bound[cid]
        self.runtime.apply(self.policy.release_claim(uid))
        del self.claims[uid]
        for per_device in self.consumed.values():
            per_device.pop(uid, None)

    @precondition(lambda self: self.claims)
    @rule(data=st.data(), forged=st.booleans())
    def start_a_claim_container(self, data: st.DataObject, forged: bool) -> None:
        grant = self.claims[data.draw(st.sampled_from(sorted(self.claims)))]
        pod, c = besteffort(f"app{next(_uids)}")
        c = with_claim_env(c, grant.uid, str(grant.cpus), key="forged" if forged else grant.key)
        try:
            created = self.runtime.create((pod, c))
        except Exception:
            assert forged  # a forger is placed natively, which may find no room; a claim's never
            return
        if forged:
            self.natives.append(created)
        else:
            self.bound[c.id] = grant.uid

    # -- native containers -------------------------------------------------------------------

    @rule(kind=st.sampled_from(["guaranteed", "burstable", "besteffort"]),
          milli=st.integers(100, 3000),
          balloon=st.sampled_from(["", "native", "fast", "wide", "combo"]))  # fmt: skip
    def start_a_native_container(self, kind: str, milli: int, balloon: str) -> None:
        name = f"n{next(_uids)}"
        pod, c = {
            "guaranteed": lambda: guaranteed(name, milli // 1000 * 1000 or 1000),
            "burstable": lambda: burstable(name, milli, 2 * milli),
            "besteffort": lambda: besteffort(name),
        }[kind]()
        if balloon:
            pod = attrs.evolve(pod, annotations={f"{ANN}/pod": balloon})
        try:
            self.natives.append(self.runtime.create((pod, c)))
        except Exception as e:  # a full node refuses a native container
            assert "balloon" in str(e) or "CPU" in str(e), e

    @precondition(lambda self: self.natives)
    @rule(data=st.data())
    def stop_a_native_container(self, data: st.DataObject) -> None:
        c = self.natives.pop(data.draw(st.integers(0, len(self.natives) - 1)))
        self.runtime.remove(c)

    @rule()
    def resynchronize(self) -> None:
        self.runtime.apply(self.policy.synchronize(*self.runtime.reported()))

    @rule()
    def restart(self) -> None:
        """A new daemon: the CPU driver restores every record before NRI's Synchronize."""
        policy = self._policy(self.spec)
        for grant in self.claims.values():
            policy.claim_cpus(grant)
        runtime = Runtime(policy)
        old = self.runtime
        runtime.pods, runtime.containers = old.pods, old.containers
        runtime.cpus, runtime.mems = old.cpus, old.mems
        self.policy, self.runtime = policy, runtime
        runtime.apply(policy.synchronize(*runtime.reported()))

    @rule(max_cpus=st.sampled_from([2, 4, 6]), min_balloons=st.integers(0, 2))
    def reconfigure(self, max_cpus: int, min_balloons: int) -> None:
        native = attrs.evolve(self.native, max_cpus=max_cpus, min_balloons=min_balloons)
        spec = self._spec(native)
        try:
            self.runtime.apply(self.policy.reconfigure(spec))
        except Exception as e:  # a configuration that cannot hold every container is refused
            assert "cannot" in str(e), e
            return
        self.spec, self.native = spec, native

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def balloons_never_overlap_nor_take_reserved_cpus(self) -> None:
        state = self.policy.state
        seen = CpuSet()
        for b in state.balloons:
            assert b.cpus.isdisjoint(seen), (b.name, b.cpus, seen)
            seen = seen | b.cpus
            if b.claim:
                assert b.cpus.isdisjoint(state.reserved), b.name

    @invariant()
    def claim_balloons_are_their_devices_type_and_cpus(self) -> None:
        state = self.policy.state
        known = scopes(state)
        for uid, grant in self.claims.items():
            b = balloon_of(state, uid)
            assert b is not None, uid
            [device] = grant.devices
            assert b.cpus == grant.cpus and b.type.name == known[device].type.name
            assert b.cpus.issubset(known[device].cpus)
            assert len(b.cpus) == self.consumed[device][uid]
        assert {b.claim for b in state.balloons if b.claim} == set(self.claims)

    @invariant()
    def only_bound_containers_run_on_claimed_cpus(self) -> None:
        claimed = CpuSet.union_all(g.cpus for g in self.claims.values())
        for cid, text in self.runtime.cpus.items():
            if cid in self.bound:
                assert CpuSet.parse(text or "") == self.claims[self.bound[cid]].cpus, cid
            elif text:
                assert CpuSet.parse(text).isdisjoint(claimed), (cid, text)


TestBalloonClaims = BalloonClaims.TestCase
TestBalloonClaims.settings = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
