"""The resource manager: the one lock and the active policy.

Every request that can change placement, from the runtime (NRI) or from kubelet (DRA),
goes through a method here, and ``self.lock`` is held while the policy decides: the kubelet
and configuration methods take it themselves; the NRI event bodies are synchronous and run
with it held by the NRI server. That single lock is what keeps the two request sources from
interleaving.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol

import attrs
import trio

from nri_resmgr.config.draswitch import say_not_applied, switch_refusal
from nri_resmgr.config.models import PolicySpec
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.errors import ConfigError
from nri_resmgr.instrumentation.metrics import CHANGES, count_reload
from nri_resmgr.resmgr.model import (
    Adjustment,
    ClaimGrant,
    Container,
    Device,
    Pod,
    Resources,
    Update,
)
from nri_resmgr.resmgr.policy import Policy, PolicyEnv
from nri_resmgr.resmgr.retry import UpdateRetry

log = logging.getLogger(__name__)


ReconfigureHook = Callable[[PolicySpec], Callable[[bool], None]]
"""Checks and prepares a new spec (raising ConfigError to refuse it) and returns the call
that completes (True) or undoes (False) the preparation once the policy has decided."""


@contextmanager
def _counted_reload() -> Iterator[None]:
    try:
        yield
    except ConfigError:
        count_reload("refused")
        raise
    count_reload("applied")
    CHANGES.notify()


class RuntimeUpdater(Protocol):
    """The runtime's side of an unsolicited update (NRI UpdateContainers)."""

    async def update_containers(self, updates: Sequence[Update]) -> list[Update]:
        """Send updates; return the ones the runtime failed to apply."""


class ResourceManager:
    """The one lock and the active policy. It keeps no pod/container registry: the runtime
    is the record of what runs (Synchronize tells all of it, each event one change), and a
    policy keeps what it needs of a pod and container with the allocation it made for them."""

    def __init__(self, policy: Policy, spec: PolicySpec, env: PolicyEnv) -> None:
        self.lock = trio.Lock()
        self.policy = policy
        self.env = env
        self.spec = spec
        self._runtime: RuntimeUpdater | None = None
        self.retry = UpdateRetry()
        """The containers whose unsolicited update failed, re-sent by ``retry_failed_updates``."""
        self.reconfigure_hooks: list[ReconfigureHook] = []
        """Asked first on every reconfigure: each may refuse; each is told the outcome."""
        policy.setup(spec, env)
        say_not_applied(spec)

    # -- configuration --------------------------------------------------------------------

    async def reconfigure(self, spec: PolicySpec) -> list[Update]:
        """Apply a new configuration, or refuse it and keep the old one."""
        async with self.lock:
            with _counted_reload():
                refusal = switch_refusal(self.spec, spec)
                if refusal:
                    raise ConfigError(refusal)
                finishers: list[Callable[[bool], None]] = []
                try:
                    for hook in self.reconfigure_hooks:
                        finishers.append(hook(spec))
                    updates = self.policy.reconfigure(spec)
                except BaseException:
                    for finish in finishers:
                        finish(False)
                    raise
                for finish in finishers:
                    finish(True)
                self.spec = spec
                say_not_applied(spec)
        await self.send_updates(updates)
        return updates

    # -- the runtime connection -------------------------------------------------------------

    def attach_runtime(self, runtime: RuntimeUpdater | None) -> None:
        self._runtime = runtime
        # Retries belong to one connection: the next one's Synchronize covers them.
        self.retry.clear()

    async def send_updates(self, updates: Sequence[Update]) -> list[Update]:
        """Push policy-initiated updates to the runtime, if one is connected; the policy is
        told of those the runtime did not apply, and they are retried (``self.retry``)."""
        if not updates:
            return []
        if self._runtime is None:
            log.warning("no runtime connected; %d container updates deferred", len(updates))
            return list(updates)
        failed = await self._runtime.update_containers(updates)
        if failed:
            ids = [u.container_id for u in failed]
            async with self.lock:
                self.policy.updates_failed(ids)
            self.retry.failed(ids)
        return failed

    async def retry_failed_updates(self) -> None:
        """Re-send failed updates with backoff until cancelled: the NRI session runs it in
        its nursery for as long as its connection lives."""
        await self.retry.run(self._resend)

    async def _resend(self, container_ids: Sequence[str]) -> set[str]:
        # The policy's state is read under the lock; the runtime is waited on without it.
        async with self.lock:
            updates = self.policy.retry_updates(container_ids)
        await self.send_updates(updates)
        return {u.container_id for u in updates}

    # -- NRI requests ---------------------------------------------------------------------
    # One synchronous body per event, run with ``self.lock`` held by the caller: the NRI
    # server takes the lock for it (at once when it is free, else in a task that waits its
    # turn; see ``nri_resmgr.nri.ttrpc.Sync``). A body never waits, so it cannot interleave
    # with another request once it runs.

    def synchronize(self, pods: Sequence[Pod], containers: Sequence[Container]) -> list[Update]:
        return self.policy.synchronize(pods, containers)

    def run_pod_sandbox(self, pod: Pod) -> None:
        self.policy.run_pod_sandbox(pod)

    def update_pod_sandbox(self, pod: Pod) -> None:
        self.policy.update_pod_sandbox(pod)

    def stop_pod_sandbox(self, pod: Pod) -> None:
        self.policy.stop_pod_sandbox(pod)

    def remove_pod_sandbox(self, pod: Pod) -> None:
        self.policy.remove_pod_sandbox(pod)

    def create_container(self, pod: Pod, container: Container) -> tuple[Adjustment, list[Update]]:
        return self.policy.create_container(pod, container)

    def start_container(self, pod: Pod, container: Container) -> None:
        self.policy.start_container(pod, container)

    def update_container(
        self, pod: Pod, container: Container, resources: Resources
    ) -> list[Update]:
        return self.policy.update_container(pod, container, resources)

    def stop_container(self, pod: Pod, container: Container) -> list[Update]:
        return self.policy.stop_container(pod, container)

    def remove_container(self, pod: Pod, container: Container) -> list[Update]:
        return self.policy.remove_container(pod, container)

    # -- kubelet (DRA) requests -----------------------------------------------------------

    async def dra_devices(self) -> list[Device]:
        async with self.lock:
            return self.policy.dra_devices()

    async def claim_cpus(self, claim: ClaimGrant) -> None:
        """Give a DRA claim its CPUs (``Policy.claim_cpus``; ClaimError leaves all as it
        was) and move the containers that must leave them (UpdateContainers)."""
        async with self.lock:
            updates = self.policy.claim_cpus(claim)
        await self.send_updates(updates)

    async def claim_picked(
        self, claim: ClaimGrant, asks: Sequence[tuple[CpuSet, int]]
    ) -> ClaimGrant:
        """A grouped claim: the policy picks its CPUs (``Policy.pick_claim_cpus``) and claims
        them under one hold of the lock, so no other request takes them in between."""
        async with self.lock:
            grant = attrs.evolve(claim, cpus=self.policy.pick_claim_cpus(asks, claim))
            updates = self.policy.claim_cpus(grant)
        await self.send_updates(updates)
        return grant

    async def release_claim(self, claim_uid: str) -> None:
        async with self.lock:
            updates = self.policy.release_claim(claim_uid)
        await self.send_updates(updates)
