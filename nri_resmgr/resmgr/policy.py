"""The contract between the resource manager and a policy.

A policy decides where containers run. The manager calls it with the manager lock held, one
call at a time, so a policy needs no locking of its own. Calls are synchronous: deciding is
pure computation, and everything that talks to the outside (the runtime, kubelet, the API
server) lives in the manager and its tasks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar, Protocol

import attrs

from nri_resmgr.config.models import PolicySpec
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.errors import ResmgrError
from nri_resmgr.instrumentation.exports import PolicyGauge, TopologyZone
from nri_resmgr.resmgr.model import (
    Adjustment,
    ClaimGrant,
    Container,
    Device,
    Pod,
    Resources,
    Update,
)


class ClaimError(ResmgrError):
    """A DRA claim the policy cannot carve (CPUs unknown, taken, or no devices offered); the
    message names the cause and the policy's state is as before the call."""


@attrs.frozen
class PolicyEnv:
    """What a policy may know about its surroundings."""

    host_root: str = ""
    node_name: str = ""


class Policy(Protocol):
    """What every policy implements. ``PolicyBase`` gives no-op defaults."""

    name: ClassVar[str]
    """The policy's name, as in the Go nri-plugins (``topology-aware``); also the DRA driver's
    name prefix (``topology-aware.nri.io``)."""

    def setup(self, spec: PolicySpec, env: PolicyEnv) -> None:
        """Take the first configuration. Raise ``ConfigError`` to refuse it."""

    def reconfigure(self, spec: PolicySpec) -> list[Update]:
        """Take a new configuration. Raise ``ConfigError`` to refuse it; the old one stays."""

    def synchronize(self, pods: Sequence[Pod], containers: Sequence[Container]) -> list[Update]:
        """Learn the pods and containers that already exist (at start and after a runtime
        restart) and return the updates that bring them to the policy's placement."""

    def run_pod_sandbox(self, pod: Pod) -> None: ...
    def update_pod_sandbox(self, pod: Pod) -> None: ...
    def stop_pod_sandbox(self, pod: Pod) -> None: ...
    def remove_pod_sandbox(self, pod: Pod) -> None: ...

    def create_container(self, pod: Pod, container: Container) -> tuple[Adjustment, list[Update]]:
        """Place a new container: its adjustment, plus updates for other containers."""

    def start_container(self, pod: Pod, container: Container) -> None: ...

    def update_container(
        self, pod: Pod, container: Container, resources: Resources
    ) -> list[Update]:
        """The container's resources change; return updates (this container's included)."""

    def stop_container(self, pod: Pod, container: Container) -> list[Update]:
        """Release the container's resources; return updates for the containers that gain."""

    def remove_container(self, pod: Pod, container: Container) -> list[Update]: ...

    def updates_failed(self, container_ids: Sequence[str]) -> None:
        """The runtime did not apply the updates sent for these containers: the policy's view
        of their cpusets must not claim what the runtime does not hold."""

    def retry_updates(self, container_ids: Sequence[str]) -> list[Update]:
        """Updates to send again to these containers, whose last update failed
        (``updates_failed``): what the policy wants for each of them now, recorded as sent.
        None for a container the policy no longer places or whose state was sent since; the
        list may carry updates the policy owes other containers."""

    def dra_devices(self) -> list[Device]:
        """The devices this policy offers through DRA (published in the ResourceSlice)."""

    def claim_cpus(self, claim: ClaimGrant) -> list[Update]:
        """Give ``claim.cpus`` to a prepared DRA claim, exclusively: they leave every shared
        pool and only containers proven to be the claim's (``model.claim_refusal``) run on
        them. Returns the updates for the containers that move off them (or onto them, for
        containers of the claim that already run). Idempotent for the same grant. Raises
        ``ClaimError`` (nothing changed) for CPUs the policy does not offer or that are taken."""

    def pick_claim_cpus(
        self, asks: Sequence[tuple[CpuSet, int]], claim: ClaimGrant | None = None
    ) -> CpuSet:
        """CPUs for a claim allocated from grouped devices: for each (group CPUs, count)
        ``count`` free CPUs of the group, chosen as exclusive grants are (``claim``: the
        claim, its devices named, CPUs not yet). Changes nothing; raises ``ClaimError`` when
        a group has fewer free."""

    def release_claim(self, claim_uid: str) -> list[Update]:
        """Return a claim's CPUs to the shared pools; unknown UIDs are no-ops."""

    devices_changed: Callable[[], None]
    """Set by the DRA layer (the slice publisher's ``trigger``): a policy whose devices change
    with what its containers hold (not only with claims and configuration) calls it when they
    did, so the slice is republished. Default: nothing listens."""

    def gauges(self) -> list[PolicyGauge]:
        """The policy's gauges for /metrics (upstream's names where upstream has them)."""

    def topology_zones(self) -> list[TopologyZone]:
        """The zones of the node's NodeResourceTopology object; empty: nothing to export."""

    def topology_attributes(self) -> list[tuple[str, str]]:
        """Attributes of that object the policy sets (a scheduler's ``topologyManagerPolicy``)."""


class PolicyBase:
    """No-op implementations of every hook, so a policy overrides only what it needs."""

    name: ClassVar[str] = "base"

    def __init__(self) -> None:
        self.env = PolicyEnv()
        self.devices_changed: Callable[[], None] = _nobody_listens

    def setup(self, spec: PolicySpec, env: PolicyEnv) -> None:
        self.env = env

    def reconfigure(self, spec: PolicySpec) -> list[Update]:
        return []

    def synchronize(self, pods: Sequence[Pod], containers: Sequence[Container]) -> list[Update]:
        return []

    def run_pod_sandbox(self, pod: Pod) -> None:
        pass

    def update_pod_sandbox(self, pod: Pod) -> None:
        pass

    def stop_pod_sandbox(self, pod: Pod) -> None:
        pass

    def remove_pod_sandbox(self, pod: Pod) -> None:
        pass

    def create_container(self, pod: Pod, container: Container) -> tuple[Adjustment, list[Update]]:
        return Adjustment(), []

    def start_container(self, pod: Pod, container: Container) -> None:
        pass

    def update_container(
        self, pod: Pod, container: Container, resources: Resources
    ) -> list[Update]:
        return []

    def stop_container(self, pod: Pod, container: Container) -> list[Update]:
        return []

    def remove_container(self, pod: Pod, container: Container) -> list[Update]:
        return []

    def updates_failed(self, container_ids: Sequence[str]) -> None:
        pass

    def retry_updates(self, container_ids: Sequence[str]) -> list[Update]:
        return []

    def dra_devices(self) -> list[Device]:
        return []

    def claim_cpus(self, claim: ClaimGrant) -> list[Update]:
        raise ClaimError(
            f"policy {self.name} offers no CPU devices; cannot claim cpus {claim.cpus}"
        )

    def pick_claim_cpus(
        self, asks: Sequence[tuple[CpuSet, int]], claim: ClaimGrant | None = None
    ) -> CpuSet:
        raise ClaimError(f"policy {self.name} offers no grouped CPU devices")

    def release_claim(self, claim_uid: str) -> list[Update]:
        return []

    def gauges(self) -> list[PolicyGauge]:
        return []

    def topology_zones(self) -> list[TopologyZone]:
        return []

    def topology_attributes(self) -> list[tuple[str, str]]:
        return []


def _nobody_listens() -> None:
    pass
