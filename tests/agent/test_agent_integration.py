"""The agent against a real kube-apiserver with the TemplatePolicy CRD (tests/kube/apiserver.py)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from nri_resmgr.agent.agent import ConfigAgent
from nri_resmgr.app import make_manager
from nri_resmgr.backoff import Backoff
from nri_resmgr.cli import Options
from nri_resmgr.config.models import PolicyDocument
from nri_resmgr.kube import AlreadyExists, KubeClient, NotFound, PatchType
from nri_resmgr.kube.resources import NAMESPACES, NODES, TEMPLATE_POLICIES
from nri_resmgr.resmgr.manager import ResourceManager
from tests.kube.apiserver import ApiServer

pytestmark = pytest.mark.integration

GROUP_LABEL = "config.nri/group"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def cr(name: str, cpu: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "config.nri/v1alpha1", "kind": "TemplatePolicy",
            "metadata": {"name": name},
            "spec": {"reservedResources": {"cpu": cpu}, **spec}}  # fmt: skip


class Cluster:
    """The test's own admin connection, one namespace and one Node per test."""

    def __init__(self, client: KubeClient, namespace: str, node: str) -> None:
        self.client, self.ns, self.node = client, namespace, node

    async def put(self, name: str, cpu: str, **spec: Any) -> None:
        """Creates the CR or replaces its spec (a JSON patch: no conflict with status writes)."""
        document = cr(name, cpu, **spec)
        try:
            await self.client.create(TEMPLATE_POLICIES, document, self.ns)
        except AlreadyExists:
            replace = [{"op": "replace", "path": "/spec", "value": document["spec"]}]
            await self.client.patch(
                TEMPLATE_POLICIES, name, replace, self.ns, patch_type=PatchType.JSON
            )

    async def delete(self, name: str) -> None:
        await self.client.delete(TEMPLATE_POLICIES, name, self.ns)

    async def label(self, group: str | None) -> None:
        patch = {"metadata": {"labels": {GROUP_LABEL: group}}}
        await self.client.patch(NODES, self.node, patch)

    async def entry(self, name: str) -> dict[str, Any] | None:
        try:
            got = await self.client.get(TEMPLATE_POLICIES, name, self.ns)
        except NotFound:
            return None
        entry: dict[str, Any] | None = ((got.get("status") or {}).get("nodes") or {}).get(self.node)
        return entry

    async def entry_status(self, name: str) -> tuple[str, int] | None:
        entry = await self.entry(name)
        return None if entry is None else (entry["status"], entry["generation"])

    def agent(self, client: KubeClient) -> ConfigAgent:
        return ConfigAgent(client, namespace=self.ns, node_name=self.node, policy_name="template",
                           backoff=lambda: Backoff(initial=0.1, maximum=1.0))  # fmt: skip


@pytest.fixture
async def cluster(template_crd: ApiServer) -> AsyncIterator[Cluster]:
    async with KubeClient(template_crd.config()) as client:
        namespace, node = unique("agent"), unique("node")
        await client.create(NAMESPACES, {"metadata": {"name": namespace}})
        await client.create(NODES, {"metadata": {"name": node}})
        yield Cluster(client, namespace, node)
        await client.delete(NODES, node)


def build_for(cluster: Cluster) -> Callable[[PolicyDocument], ResourceManager]:
    options = Options(policy="template", node_name=cluster.node, config_namespace=cluster.ns)
    return lambda doc: make_manager(options, doc)


@asynccontextmanager
async def agent_scope(api: ApiServer) -> AsyncIterator[tuple[KubeClient, trio.Nursery]]:
    """The agent's client and a nursery for it: the agent is cancelled before its client
    closes, so no status write can meet a closed client after the test's last check."""
    async with KubeClient(api.config()) as client, trio.open_nursery() as nursery:
        yield client, nursery
        nursery.cancel_scope.cancel()


async def start(nursery: trio.Nursery, agent: ConfigAgent, cluster: Cluster) -> ResourceManager:
    with trio.fail_after(60):
        manager = await agent.initial_config(build_for(cluster))
    agent.attach(manager.reconfigure)
    await nursery.start(agent.serve)
    return manager


async def eventually(check: Callable[[], Any], timeout: float = 60) -> None:
    """Polls an async (or plain) check until it is true; only a failure waits out the timeout."""
    with trio.fail_after(timeout):
        while True:
            result = check()
            if not isinstance(result, bool):
                result = await result
            if result:
                return
            await trio.sleep(0.05)


def cpu(manager: ResourceManager) -> str | None:
    value = manager.spec.reserved_resources.cpu
    return None if value is None else value.text


async def test_follows_node_group_default_live_and_moves_its_status(
    template_crd: ApiServer, cluster: Cluster, nursery: trio.Nursery
) -> None:
    c = cluster
    await c.put("default", "1")
    async with agent_scope(template_crd) as (agent_client, nursery):
        agent = c.agent(agent_client)
        manager = await start(nursery, agent, c)
        assert cpu(manager) == "1"
        await eventually(lambda: _is(c.entry_status("default"), ("Success", 1)))

        await c.put("group.fast", "2")
        await c.label("fast")
        await eventually(lambda: cpu(manager) == "2")
        await eventually(lambda: _is(c.entry_status("group.fast"), ("Success", 1)))
        await eventually(lambda: _is(c.entry_status("default"), None))

        await c.put(f"node.{c.node}", "3")
        await eventually(lambda: cpu(manager) == "3")
        await eventually(lambda: _is(c.entry_status(f"node.{c.node}"), ("Success", 1)))
        await eventually(lambda: _is(c.entry_status("group.fast"), None))

        await c.put("group.fast", "4")  # not in force while the node CR exists
        await c.put(f"node.{c.node}", "5")
        await eventually(lambda: cpu(manager) == "5")
        await eventually(lambda: _is(c.entry_status(f"node.{c.node}"), ("Success", 2)))

        await c.delete(f"node.{c.node}")
        await eventually(lambda: cpu(manager) == "4")
        await eventually(lambda: _is(c.entry_status("group.fast"), ("Success", 2)))

        await c.label(None)
        await eventually(lambda: cpu(manager) == "1")
        await eventually(lambda: _is(c.entry_status("default"), ("Success", 1)))
        await eventually(lambda: _is(c.entry_status("group.fast"), None))

        with trio.fail_after(30):
            await agent.stop()
        assert await c.entry_status("default") is None
        assert (agent.applied, agent.rejected) == (6, 0)


async def test_bad_config_fails_with_the_field_and_the_old_config_stays(
    template_crd: ApiServer,
    cluster: Cluster,
    nursery: trio.Nursery,
    caplog: pytest.LogCaptureFixture,
) -> None:
    c = cluster
    await c.put("default", "1")
    async with agent_scope(template_crd) as (agent_client, nursery):
        manager = await start(nursery, c.agent(agent_client), c)
        # The CRD admits any string as reportPeriod, the config rules want a duration.
        with caplog.at_level(logging.ERROR):
            await c.put("default", "1", instrumentation={"reportPeriod": "soon"})
            await eventually(lambda: _is(c.entry_status("default"), ("Failure", 2)))
        entry = await c.entry("default")
        assert entry is not None
        assert entry["errors"].startswith("spec.instrumentation.reportPeriod")
        assert "spec.instrumentation.reportPeriod" in caplog.text
        assert cpu(manager) == "1"

        await c.put("default", "1", dra={"enabled": True})
        await eventually(lambda: _is(c.entry_status("default"), ("Failure", 3)))
        entry = await c.entry("default")
        assert entry is not None and "spec.dra.enabled" in entry["errors"]
        assert "restart nri-resmgr" in entry["errors"]
        assert not manager.spec.dra.enabled

        await c.put("default", "2")
        await eventually(lambda: cpu(manager) == "2")
        await eventually(lambda: _is(c.entry_status("default"), ("Success", 4)))


async def test_apiserver_restart_mid_watch_misses_no_change(
    template_crd: ApiServer,
    cluster: Cluster,
    nursery: trio.Nursery,
    caplog: pytest.LogCaptureFixture,
) -> None:
    c = cluster
    await c.put("default", "1")
    async with agent_scope(template_crd) as (agent_client, nursery):
        manager = await start(nursery, c.agent(agent_client), c)
        await eventually(lambda: _is(c.entry_status("default"), ("Success", 1)))
        with caplog.at_level(logging.WARNING, logger="nri_resmgr.kube.watch"):
            async with template_crd.down():
                # The agent saw it go: mid-watch, or mid-list when a watch had just ended.
                await eventually(lambda: _saw_outage(caplog.text))
        # Made while the agent's watches are still backing off: they must still arrive.
        await c.put("group.after", "7")
        await c.label("after")
        await c.put("group.after", "8")
        await eventually(lambda: cpu(manager) == "8")
        await eventually(lambda: _is(c.entry_status("group.after"), ("Success", 2)))
        await eventually(lambda: _is(c.entry_status("default"), None))
        await c.put(f"node.{c.node}", "9")
        await eventually(lambda: cpu(manager) == "9")


def _saw_outage(log_text: str) -> bool:
    return "reconnecting" in log_text or "list failed" in log_text


async def _is(entry: Any, expected: tuple[str, int] | None) -> bool:
    return bool(await entry == expected)
