"""The agent against the in-memory FakeKube: selection, dedup, status, refusals, stop."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
import trio

from nri_resmgr.agent.agent import ConfigAgent
from nri_resmgr.app import make_manager
from nri_resmgr.backoff import Backoff
from nri_resmgr.cli import Options
from nri_resmgr.config.models import PolicyDocument
from nri_resmgr.errors import ConfigError, Fatal
from nri_resmgr.kube import KubeClient
from nri_resmgr.resmgr.manager import ResourceManager
from tests.agent.fakekube import NODES_PATH, FakeKube

NS = "ns"
NODE = "n1"
CRS = f"/apis/config.nri/v1alpha1/namespaces/{NS}/templatepolicies"
OPTIONS = Options(policy="template", node_name=NODE, config_namespace=NS)

Fake = tuple[FakeKube, KubeClient]


def cr(name: str, cpu: str = "750m", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "config.nri/v1alpha1", "kind": "TemplatePolicy",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"reservedResources": {"cpu": cpu}, **spec}}  # fmt: skip


def node(**labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "labels": labels}}


def new_agent(client: KubeClient) -> ConfigAgent:
    agent = ConfigAgent(client, namespace=NS, node_name=NODE, policy_name="template",
                        backoff=lambda: Backoff(initial=0.01, maximum=0.05),
                        final_write_timeout=5)  # fmt: skip
    agent.status.place_spread = 0  # no wait before a new status entry (test_status_room.py)
    return agent


def build(doc: PolicyDocument) -> ResourceManager:
    return make_manager(OPTIONS, doc)


async def eventually(check: Callable[[], bool], what: str = "condition") -> None:
    with trio.fail_after(10):
        while not check():
            await trio.sleep(0.005)


async def start(nursery: trio.Nursery, agent: ConfigAgent) -> ResourceManager:
    with trio.fail_after(10):
        manager = await agent.initial_config(build)
    agent.attach(manager.reconfigure)
    await nursery.start(agent.serve)
    return manager


def cpu(manager: ResourceManager) -> str | None:
    value = manager.spec.reserved_resources.cpu
    return None if value is None else value.text


def entry_status(kube: FakeKube, name: str) -> tuple[str, int] | None:
    entry = kube.node_status(CRS, name, NODE)
    return None if entry is None else (entry["status"], entry["generation"])


async def test_starts_from_default_and_reports_success(fake: Fake, nursery: trio.Nursery) -> None:
    kube, client = fake
    kube.put(NODES_PATH, node())
    kube.put(CRS, cr("default", "2"))
    kube.put(CRS, cr("group.other", "3"))  # another group's config is none of ours
    agent = new_agent(client)
    manager = await start(nursery, agent)
    assert cpu(manager) == "2"
    assert agent.doc is not None and agent.doc.name == "default"
    await eventually(lambda: entry_status(kube, "default") == ("Success", 1))
    entry = kube.node_status(CRS, "default", NODE)
    assert entry is not None and entry["errors"] == "" and entry["timestamp"].endswith("Z")


async def test_node_beats_group_beats_default_live(fake: Fake, nursery: trio.Nursery) -> None:
    kube, client = fake
    kube.put(NODES_PATH, node())
    kube.put(CRS, cr("default", "1"))
    kube.put(CRS, cr("group.g", "2"))
    manager = await start(nursery, new_agent(client))
    assert cpu(manager) == "1"

    kube.put(NODES_PATH, node(**{"config.nri/group": "g"}))
    await eventually(lambda: cpu(manager) == "2")
    await eventually(lambda: entry_status(kube, "group.g") == ("Success", 1))
    await eventually(lambda: entry_status(kube, "default") is None)

    kube.put(CRS, cr(f"node.{NODE}", "3"))
    await eventually(lambda: cpu(manager) == "3")
    await eventually(lambda: entry_status(kube, f"node.{NODE}") == ("Success", 1))
    await eventually(lambda: entry_status(kube, "group.g") is None)

    kube.put(CRS, cr("group.g", "4"))  # ignored while the node CR exists
    kube.put(CRS, cr(f"node.{NODE}", "5"))
    await eventually(lambda: cpu(manager) == "5")
    assert entry_status(kube, "group.g") is None

    kube.delete(CRS, f"node.{NODE}")
    await eventually(lambda: cpu(manager) == "4")
    await eventually(lambda: entry_status(kube, "group.g") == ("Success", 2))

    kube.put(NODES_PATH, node())  # label removed: back to default
    await eventually(lambda: cpu(manager) == "1")
    await eventually(lambda: entry_status(kube, "default") == ("Success", 1))
    await eventually(lambda: entry_status(kube, "group.g") is None)


async def test_waits_for_a_config_and_says_so(
    fake: Fake, nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    kube, client = fake
    agent = new_agent(client)
    result: list[ResourceManager] = []

    async def wait() -> None:
        result.append(await agent.initial_config(build))

    with caplog.at_level(logging.INFO):
        nursery.start_soon(wait)
        await eventually(lambda: "no effective configuration" in caplog.text)
        assert not result
        kube.put(CRS, cr("default", "2"))  # no Node object at all: default applies
        await eventually(lambda: bool(result))
    assert cpu(result[0]) == "2"


async def test_bad_update_is_rejected_and_the_old_config_stays(
    fake: Fake, nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    kube, client = fake
    kube.put(CRS, cr("default", "1"))
    agent = new_agent(client)
    manager = await start(nursery, agent)
    await eventually(lambda: entry_status(kube, "default") == ("Success", 1))
    patches_before = len(kube.status_patches)

    with caplog.at_level(logging.ERROR):
        kube.put(CRS, cr("default", "1", instrumentation={"reportPeriod": "soon"}))
        await eventually(lambda: entry_status(kube, "default") == ("Failure", 2))
    entry = kube.node_status(CRS, "default", NODE)
    assert entry is not None
    assert "spec.instrumentation.reportPeriod: expected a duration" in entry["errors"]
    assert "rejected, the previous configuration stays" in caplog.text
    assert "spec.instrumentation.reportPeriod" in caplog.text
    assert cpu(manager) == "1"
    assert (agent.applied, agent.rejected) == (1, 1)

    # The agent's own status writes come back as MODIFIED events: never re-applied. Events
    # reach the agent in order on one watch, so once the next spec change is reported the
    # echo of the earlier status write has been seen; a re-application would show in the
    # counts (an event to wait on, not a sleep).
    assert len(kube.status_patches) == patches_before + 1
    kube.put(CRS, cr("default", "2"))
    await eventually(lambda: entry_status(kube, "default") == ("Success", 3))
    assert cpu(manager) == "2"
    assert (agent.applied, agent.rejected) == (2, 1)
    assert len(kube.status_patches) == patches_before + 2


async def test_dra_toggle_is_refused_asking_for_a_restart(
    fake: Fake, nursery: trio.Nursery
) -> None:
    kube, client = fake
    kube.put(CRS, cr("default", "1"))
    manager = await start(nursery, new_agent(client))
    kube.put(CRS, cr("default", "2", dra={"enabled": True}))
    await eventually(lambda: entry_status(kube, "default") == ("Failure", 2))
    entry = kube.node_status(CRS, "default", NODE)
    assert entry is not None
    assert "spec.dra.enabled: cannot enable DRA" in entry["errors"]
    assert "restart" in entry["errors"]
    assert cpu(manager) == "1" and not manager.spec.dra.enabled


async def test_bad_initial_config_is_fatal_after_writing_failure(fake: Fake) -> None:
    kube, client = fake
    kube.put(CRS, cr("default", "banana"))
    with trio.fail_after(10), pytest.raises(ConfigError) as info:
        await new_agent(client).initial_config(build)
    assert info.value.errors[0].startswith("spec.reservedResources.cpu:")
    entry = kube.node_status(CRS, "default", NODE)
    assert entry is not None and entry["status"] == "Failure"
    assert "spec.reservedResources.cpu" in entry["errors"]


async def test_policy_refusing_the_initial_config_is_fatal_too(fake: Fake) -> None:
    kube, client = fake
    kube.put(CRS, cr("default"))

    def refuse(doc: PolicyDocument) -> None:
        raise ConfigError("spec.availableResources.cpu: no such CPUs on this node")

    with trio.fail_after(10), pytest.raises(ConfigError, match="no such CPUs"):
        await new_agent(client).initial_config(refuse)
    assert entry_status(kube, "default") == ("Failure", 1)


async def test_status_write_failures_are_retried(fake: Fake, nursery: trio.Nursery) -> None:
    kube, client = fake
    kube.put(CRS, cr("default"))
    kube.fail_status = 3
    agent = new_agent(client)
    await start(nursery, agent)
    await eventually(lambda: entry_status(kube, "default") == ("Success", 1))
    assert agent.status.failures == 3


async def test_stop_clears_the_entry_and_is_idempotent(fake: Fake, nursery: trio.Nursery) -> None:
    kube, client = fake
    kube.put(CRS, cr("default"))
    kube.put(CRS, cr("group.x"))
    kube.put(CRS, cr("default-unrelated"))
    other = {"status": "Success", "generation": 1, "errors": "", "timestamp": "t"}
    kube.objects[(CRS, "default")]["status"] = {"nodes": {"n2": other}}
    agent = new_agent(client)
    await start(nursery, agent)
    await eventually(lambda: entry_status(kube, "default") == ("Success", 1))
    await agent.stop()
    await agent.stop()
    assert entry_status(kube, "default") is None
    assert kube.node_status(CRS, "default", "n2") == other  # other nodes' entries stay
    assert agent.cr_in_force is None


async def test_forbidden_watch_is_fatal(fake: Fake) -> None:
    kube, client = fake
    kube.forbidden.add(CRS)
    with trio.fail_after(10), pytest.raises(Fatal, match=r"templatepolicies ns/.*403"):
        await new_agent(client).initial_config(build)


async def test_deprecated_group_label_selects_with_a_warning(
    fake: Fake, nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    kube, client = fake
    kube.put(NODES_PATH, node(**{"group.config.nri": "legacy"}))
    kube.put(CRS, cr("default", "1"))
    kube.put(CRS, cr("group.legacy", "2"))
    with caplog.at_level(logging.WARNING):
        manager = await start(nursery, new_agent(client))
    assert cpu(manager) == "2"
    assert "group.config.nri=legacy is deprecated" in caplog.text


async def test_group_without_cr_and_no_default_keeps_config_and_clears_entry(
    fake: Fake, nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    kube, client = fake
    kube.put(NODES_PATH, node(**{"config.nri/group": "a"}))
    kube.put(CRS, cr("group.a", "2"))
    manager = await start(nursery, new_agent(client))
    await eventually(lambda: entry_status(kube, "group.a") == ("Success", 1))
    with caplog.at_level(logging.WARNING):
        kube.put(NODES_PATH, node(**{"config.nri/group": "b"}))
        await eventually(lambda: entry_status(kube, "group.a") is None)
    assert "no effective configuration" in caplog.text
    assert cpu(manager) == "2"
    kube.put(NODES_PATH, node(**{"config.nri/group": "a"}))  # back: reported again
    await eventually(lambda: entry_status(kube, "group.a") == ("Success", 1))
