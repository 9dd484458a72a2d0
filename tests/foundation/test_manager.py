"""The resource manager: one lock for every request source, DRA toggling refused."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from nri_resmgr._gen.nri.pkg.api import v1alpha1 as api
from nri_resmgr.config.loader import structure_spec
from nri_resmgr.config.models import PolicySpec
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.errors import ConfigError
from nri_resmgr.nri.handlers import PLUGIN_SERVICE, PluginHandlers
from nri_resmgr.policies import create_policy
from nri_resmgr.policies.template import TemplatePolicy
from nri_resmgr.resmgr.manager import ResourceManager
from nri_resmgr.resmgr.model import Adjustment, ClaimGrant, Container, Pod, Update
from nri_resmgr.resmgr.policy import PolicyBase, PolicyEnv


def spec(extra: str = "") -> PolicySpec:
    from nri_resmgr.config.documents import parse_yaml

    return structure_spec(parse_yaml(f"reservedResources: {{cpu: 1}}\n{extra}"), "TemplatePolicy")


class OverlapDetector(PolicyBase):
    """Counts how many calls are inside the policy at once (must never exceed one)."""

    name = "overlap"

    def __init__(self) -> None:
        super().__init__()
        self.inside = 0
        self.max_inside = 0
        self.calls: list[str] = []

    def _enter(self, what: str) -> None:
        self.inside += 1
        self.max_inside = max(self.max_inside, self.inside)
        self.calls.append(what)

    def create_container(self, pod: Pod, container: Container) -> tuple[Adjustment, list[Update]]:
        self._enter("create")
        self.inside -= 1
        return Adjustment(cpuset_cpus="0"), []

    def claim_cpus(self, claim: ClaimGrant) -> list[Update]:
        self._enter("prepare")
        self.inside -= 1
        return []


async def test_nri_and_kubelet_requests_are_serialized_by_one_lock() -> None:
    policy = OverlapDetector()
    manager = ResourceManager(policy, spec(), PolicyEnv())
    pod = Pod(id="p", name="p", namespace="default")
    order: list[str] = []

    # While the lock is held (a request being served), neither kind of request gets in.
    await manager.lock.acquire()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_create, manager, pod, order)
        nursery.start_soon(_prepare, manager, order)
        await trio.testing.wait_all_tasks_blocked()
        assert order == []
        assert policy.calls == []
        manager.lock.release()
    assert sorted(order) == ["create", "prepare"]
    assert policy.max_inside == 1


async def _create(manager: ResourceManager, pod: Pod, order: list[str]) -> None:
    """CreateContainer as the NRI server runs it when the lock is taken: its task waits."""
    handlers = PluginHandlers(manager, lambda updates: None)
    create = handlers.service()[PLUGIN_SERVICE]["CreateContainer"]
    request = api.CreateContainerRequest(
        pod=api.PodSandbox(id=pod.id, name=pod.name, namespace=pod.namespace),
        container=api.Container(id="c", pod_sandbox_id=pod.id, name="c"),
    )
    reply = api.CreateContainerResponse().parse(await create.call(bytes(request)))
    assert reply.adjust.linux.resources.cpu.cpus == "0"
    order.append("create")


async def _prepare(manager: ResourceManager, order: list[str]) -> None:
    await manager.claim_cpus(ClaimGrant("uid-1", "default", CpuSet([1]), "k" * 32, "x/cpu=c"))
    order.append("prepare")


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("", "dra: {enabled: true}"),
        ("dra: {enabled: true}", "dra: {enabled: false}"),
        ("dra: {enabled: true}", ""),
    ],
)
async def test_turning_dra_on_or_off_at_runtime_is_refused(old: str, new: str) -> None:
    manager = ResourceManager(TemplatePolicy(), spec(old), PolicyEnv())
    before = manager.spec
    with pytest.raises(ConfigError, match="restart nri-resmgr"):
        await manager.reconfigure(spec(new))
    assert manager.spec is before


async def test_unset_and_false_are_both_off_so_switching_between_them_is_allowed() -> None:
    manager = ResourceManager(TemplatePolicy(), spec(""), PolicyEnv())
    new = spec("dra: {enabled: false}")
    await manager.reconfigure(new)
    assert manager.spec is new


def test_policy_selection_by_name() -> None:
    assert isinstance(create_policy("template"), TemplatePolicy)
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        create_policy("nope")


async def test_template_policy_changes_nothing() -> None:
    manager = ResourceManager(TemplatePolicy(), spec(), PolicyEnv())
    pod = Pod(id="p", name="p", namespace="default")
    async with manager.lock:
        adj, updates = manager.create_container(pod, Container(id="c", pod_id="p", name="c"))
        assert adj.is_empty()
        assert updates == []
        assert manager.synchronize([pod], []) == []
