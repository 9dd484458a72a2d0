"""The resource manager: the one lock, the active policy, and the pod/container cache.

Every request that can change placement, from the runtime (NRI) or from kubelet (DRA),
goes through a method here, and every such method holds ``self.lock`` while the policy
decides. That single lock is what keeps the two request sources from interleaving.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol

import trio

from nri_resmgr.config.models import PolicySpec
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.errors import ConfigError
from nri_resmgr.instrumentation.metrics import CHANGES, count_reload
from nri_resmgr.resmgr.model import (
    Adjustment,
    ClaimResult,
    Container,
    Device,
    Pod,
    Resources,
    Update,
)
from nri_resmgr.resmgr.policy import Policy, PolicyEnv

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
    """The one lock, and the one registry of the pods and containers the runtime has
    (``pods``, ``containers``); policies keep no copy (each allocation carries its own)."""

    def __init__(self, policy: Policy, spec: PolicySpec, env: PolicyEnv) -> None:
        self.lock = trio.Lock()
        self.policy = policy
        self.env = env
        self.spec = spec
        self.pods: dict[str, Pod] = {}
        self.containers: dict[str, Container] = {}
        self._runtime: RuntimeUpdater | None = None
        self.reconfigure_hooks: list[ReconfigureHook] = []
        """Asked first on every reconfigure: each may refuse; each is told the outcome."""
        policy.setup(spec, env)

    # -- configuration --------------------------------------------------------------------

    async def reconfigure(self, spec: PolicySpec) -> list[Update]:
        """Apply a new configuration, or refuse it and keep the old one."""
        async with self.lock:
            with _counted_reload():
                refusal = dra_toggle_refusal(self.spec, spec)
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
        await self.send_updates(updates)
        return updates

    # -- the runtime connection -------------------------------------------------------------

    def attach_runtime(self, runtime: RuntimeUpdater | None) -> None:
        self._runtime = runtime

    async def send_updates(self, updates: Sequence[Update]) -> list[Update]:
        """Push policy-initiated updates to the runtime, if one is connected."""
        if not updates:
            return []
        if self._runtime is None:
            log.warning("no runtime connected; %d container updates deferred", len(updates))
            return list(updates)
        failed = await self._runtime.update_containers(updates)
        for u in failed:
            log.warning("runtime failed to update container %s", u.container_id)
        if failed:
            async with self.lock:
                self.policy.updates_failed([u.container_id for u in failed])
        return failed

    # -- NRI requests ---------------------------------------------------------------------

    async def synchronize(
        self, pods: Sequence[Pod], containers: Sequence[Container]
    ) -> list[Update]:
        async with self.lock:
            self.pods = {p.id: p for p in pods}
            self.containers = {c.id: c for c in containers}
            return self.policy.synchronize(pods, containers)

    # Each event has a body that runs with the lock held (``*_held``) and an async method
    # that takes the lock for it. The NRI reader answers an event in place when the lock is
    # free (``PluginHandlers._when_free`` takes it with ``acquire_nowait``), so most events
    # never wait on the scheduler.

    async def run_pod_sandbox(self, pod: Pod) -> None:
        async with self.lock:
            self.run_pod_sandbox_held(pod)

    def run_pod_sandbox_held(self, pod: Pod) -> None:
        self.pods[pod.id] = pod
        self.policy.run_pod_sandbox(pod)

    async def update_pod_sandbox(self, pod: Pod) -> None:
        async with self.lock:
            self.pods[pod.id] = pod
            self.policy.update_pod_sandbox(pod)

    async def stop_pod_sandbox(self, pod: Pod) -> None:
        async with self.lock:
            self.stop_pod_sandbox_held(pod)

    def stop_pod_sandbox_held(self, pod: Pod) -> None:
        self.policy.stop_pod_sandbox(pod)

    async def remove_pod_sandbox(self, pod: Pod) -> None:
        async with self.lock:
            self.remove_pod_sandbox_held(pod)

    def remove_pod_sandbox_held(self, pod: Pod) -> None:
        self.pods.pop(pod.id, None)
        self.policy.remove_pod_sandbox(pod)

    async def create_container(
        self, pod: Pod, container: Container
    ) -> tuple[Adjustment, list[Update]]:
        async with self.lock:
            return self.create_container_held(pod, container)

    def create_container_held(
        self, pod: Pod, container: Container
    ) -> tuple[Adjustment, list[Update]]:
        self.pods.setdefault(pod.id, pod)
        self.containers[container.id] = container
        return self.policy.create_container(pod, container)

    async def start_container(self, pod: Pod, container: Container) -> None:
        async with self.lock:
            self.start_container_held(pod, container)

    def start_container_held(self, pod: Pod, container: Container) -> None:
        self.containers[container.id] = container
        self.policy.start_container(pod, container)

    async def update_container(
        self, pod: Pod, container: Container, resources: Resources
    ) -> list[Update]:
        async with self.lock:
            self.containers[container.id] = container
            return self.policy.update_container(pod, container, resources)

    async def stop_container(self, pod: Pod, container: Container) -> list[Update]:
        async with self.lock:
            return self.stop_container_held(pod, container)

    def stop_container_held(self, pod: Pod, container: Container) -> list[Update]:
        return self.policy.stop_container(pod, container)

    async def remove_container(self, pod: Pod, container: Container) -> list[Update]:
        async with self.lock:
            return self.remove_container_held(pod, container)

    def remove_container_held(self, pod: Pod, container: Container) -> list[Update]:
        self.containers.pop(container.id, None)
        return self.policy.remove_container(pod, container)

    # -- kubelet (DRA) requests -----------------------------------------------------------

    async def dra_devices(self) -> list[Device]:
        async with self.lock:
            return self.policy.dra_devices()

    async def prepare_claims(self, claim_uids: Sequence[str]) -> list[ClaimResult]:
        async with self.lock:
            return self.policy.prepare_claims(claim_uids)

    async def unprepare_claims(self, claim_uids: Sequence[str]) -> list[ClaimResult]:
        async with self.lock:
            return self.policy.unprepare_claims(claim_uids)

    async def claim_cpus(self, claim_uid: str, cpus: CpuSet) -> None:
        """Give ``cpus`` to a DRA claim (``Policy.claim_cpus``; ClaimError leaves all as it
        was) and move the containers that must leave them (UpdateContainers)."""
        async with self.lock:
            updates = self.policy.claim_cpus(claim_uid, cpus)
        await self.send_updates(updates)

    async def release_claim(self, claim_uid: str) -> None:
        async with self.lock:
            updates = self.policy.release_claim(claim_uid)
        await self.send_updates(updates)


def dra_toggle_refusal(old: PolicySpec, new: PolicySpec) -> str | None:
    """DRA is started or not at daemon start; switching it needs a restart."""
    was, now = bool(old.dra.enabled), bool(new.dra.enabled)
    if was == now:
        return None
    verb = "enable" if now else "disable"
    return (
        f"spec.dra.enabled: cannot {verb} DRA on a running daemon; "
        "restart nri-resmgr to apply this change"
    )
