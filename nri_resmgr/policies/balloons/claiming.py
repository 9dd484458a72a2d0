"""The balloons policy's DRA methods (``resmgr.policy.Policy``): devices, Prepare's
``pick_claim_cpus``/``claim_cpus``, Unprepare's ``release_claim``, and binding the claims'
containers. What a claim's balloon is and how devices are computed: ``dra.py``."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import attrs

from nri_resmgr.cpus.errors import PlacementError
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.balloons.balloon import Balloon
from nri_resmgr.policies.balloons.dra import ClaimBalloons, balloon_of, publishing
from nri_resmgr.policies.balloons.restore import Live
from nri_resmgr.policies.balloons.state import Balloons
from nri_resmgr.policies.balloons.types import DEFAULT, BalloonsError, Matcher
from nri_resmgr.policies.requests import container_request
from nri_resmgr.resmgr.model import ClaimGrant, Container, Device, Pod, Update
from nri_resmgr.resmgr.policy import ClaimError

log = logging.getLogger(__name__)


class ClaimsMixin:
    """Mixed into ``BalloonsPolicy``, which provides the state and the placement calls."""

    _claims: ClaimBalloons
    _published: list[Device] | None
    _state: Balloons | None
    devices_changed: Callable[[], None]

    if TYPE_CHECKING:

        @property
        def state(self) -> Balloons: ...
        @property
        def matcher(self) -> Matcher: ...
        def _control(self) -> None: ...
        def _place(self, live: Live) -> Balloon: ...
        def _remember_settings(self, live: Live) -> None: ...
        def _live(
            self,
            matcher: Matcher,
            pod: Pod,
            c: Container,
            cpus: CpuSet | None,
            mems: CpuSet | None,
            running: bool = False,
        ) -> Live: ...

    def _after_decision(self) -> None:
        """The control step, and the slice republished when the devices changed."""
        self._control()
        if self._state is None or (not publishing(self._state) and not self._published):
            return
        devices = self._claims.devices(self._state)
        if devices != self._published:
            self._published = devices
            self.devices_changed()

    def _claim_live(self, pod: Pod, c: Container) -> Live:
        """``c`` as a Live of no particular type yet (``_join_claim`` decides)."""
        t = self.matcher.by_name(DEFAULT)
        assert t is not None
        return Live(pod, c, t, container_request(pod, c).cpu_request, None, None)

    def _join_claim(self, live: Live) -> Balloon | None:
        """Put ``live`` in the balloon of the claim it is proven to hold; None if none."""
        if not live.container.claims:
            return None
        uid = self._claims.binding(live.pod, live.name, live.container)
        b = None if uid is None else balloon_of(self.state, uid)
        if b is None:
            return None
        self.state.join(b, attrs.evolve(live, type=b.type).allocation(), live.pod.namespace)
        self._remember_settings(attrs.evolve(live, type=b.type))
        log.info("%s: runs in balloon %s of DRA claim %s", live.name, b.name, uid)
        return b

    def dra_devices(self) -> list[Device]:
        return self._claims.devices(self.state)

    def pick_claim_cpus(
        self, asks: Sequence[tuple[CpuSet, int]], claim: ClaimGrant | None = None
    ) -> CpuSet:
        if claim is None:
            raise ClaimError("balloons: a claim's devices are needed to pick its CPUs")
        return self._claims.pick(self.state, asks, claim)

    def claim_cpus(self, claim: ClaimGrant) -> list[Update]:
        state = self.state
        held = self._claims.grants.get(claim.uid)
        if held == claim:
            return []
        if held is not None:
            raise ClaimError(f"claim {claim.uid} is already prepared with cpus {held.cpus}")
        scope = self._claims.check(state, claim)
        b = self._claims.add(state, claim, scope)
        for other in state.balloons:
            if not other.claim:
                state.fit(other)  # an empty native balloon that gave CPUs up takes others
        # Containers already running with the claim's variables move into its balloon.
        for a in list(state.members):
            if a.pod is not None and a.container is not None and claim.uid in a.container.claims:
                state.leave(a.container_id)
                self._join_claim(self._claim_live(a.pod, a.container))
        log.info("DRA claim %s: balloon %s with cpus %s", claim.uid, b.name, b.cpus)
        updates = state.refresh()
        self._after_decision()
        return updates

    def release_claim(self, claim_uid: str) -> list[Update]:
        state = self.state
        b = balloon_of(state, claim_uid)
        members = [m for m in (state.members.get(cid) for cid in list(b.members)) if m] if b else []
        for m in members:
            state.leave(m.container_id)
        if self._claims.remove(state, claim_uid) is None:
            return []
        for m in members:
            if m.pod is None or m.container is None:
                continue
            # Still running (unprepare came first): placed as if it named no claim.
            live = self._live(self.matcher, m.pod, m.container, None, None, running=True)
            try:
                self._place(live)
            except (BalloonsError, PlacementError) as e:
                log.error("%s: %s; left as the runtime has it", live.name, e)
        log.info("DRA claim %s: balloon removed, cpus %s free", claim_uid, b.cpus if b else "")
        updates = state.refresh()
        self._after_decision()
        return updates


__all__ = ["ClaimsMixin"]
