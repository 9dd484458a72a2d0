"""Helpers of the NRI tests and benchmark: a real ResourceManager with a tiny policy."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import trio

from nri_resmgr._gen.nri.pkg.api import v1alpha1 as api
from nri_resmgr.backoff import Backoff
from nri_resmgr.config.models import TemplateSpec
from nri_resmgr.nri.service import NriService
from nri_resmgr.policies.template import TemplatePolicy
from nri_resmgr.resmgr.manager import ResourceManager
from nri_resmgr.resmgr.model import Adjustment, Container, Pod, Update
from nri_resmgr.resmgr.policy import PolicyEnv


class PinningPolicy(TemplatePolicy):
    """Pins every container to CPUs 0-1 and remembers what it was told."""

    name = "test-pinning"

    def __init__(self) -> None:
        super().__init__()
        self.synced: list[tuple[int, int]] = []
        self.removed: list[str] = []

    def synchronize(self, pods: Sequence[Pod], containers: Sequence[Container]) -> list[Update]:
        self.synced.append((len(pods), len(containers)))
        return [Update(c.id, Adjustment(cpuset_cpus="0-1")) for c in containers]

    def create_container(self, pod: Pod, container: Container) -> tuple[Adjustment, list[Update]]:
        return Adjustment(cpuset_cpus="0-1", cpuset_mems="0", cpu_shares=512), []

    def remove_container(self, pod: Pod, container: Container) -> list[Update]:
        self.removed.append(container.id)
        return [Update("survivor", Adjustment(cpuset_cpus="0-3"))]


def make_manager(policy: TemplatePolicy | None = None) -> ResourceManager:
    return ResourceManager(policy or PinningPolicy(), TemplateSpec(), PolicyEnv())


def fast_backoff() -> Backoff:
    return Backoff(initial=0.01, maximum=0.05)


@asynccontextmanager
async def running_service(manager: ResourceManager, path: str) -> AsyncIterator[NriService]:
    service = NriService(manager, path, "resmgr", "90", env={}, backoff=fast_backoff())
    async with trio.open_nursery() as nursery:
        await nursery.start(service.serve)
        yield service
        await service.stop()


def pod(n: int = 0) -> api.PodSandbox:
    return api.PodSandbox(id=f"pod{n}", name=f"pod-{n}", namespace="default", uid=f"uid-{n}")


def container(n: int, pod_n: int = 0) -> api.Container:
    return api.Container(id=f"ctr{n}", pod_sandbox_id=f"pod{pod_n}", name=f"c{n}")
