"""Faults on the configuration path: a config CR flapping between good and bad, and the API
server failing under the agent (5xx, 409, slow replies, dropped watches).

Already covered elsewhere and not repeated here: publisher retries through 5xx, hangs and
409 on create (tests/dra/test_publisher.py::test_api_failures_are_retried_until_the_server_
is_healthy), watch reconnects after 5xx/drops and relists after 410 (tests/kube/test_watch.py),
status write 500s (tests/agent/test_agent.py::test_status_write_failures_are_retried), and a
real kube-apiserver restart under the agent (tests/agent/test_agent_integration.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import attrs
import trio

from nri_resmgr.agent.agent import ConfigAgent
from nri_resmgr.app import make_manager
from nri_resmgr.backoff import Backoff
from nri_resmgr.cli import Options
from nri_resmgr.config.models import PolicyDocument
from nri_resmgr.kube import KubeClient
from nri_resmgr.resmgr.manager import ResourceManager
from tests.agent.fakekube import FakeKube
from tests.kube.conftest import ServeFake
from tests.kube.fakeserver import DropConnection, Reply, Request, status_reply

NS = "ns"
NODE = "n1"
CRS = f"/apis/config.nri/v1alpha1/namespaces/{NS}/topologyawarepolicies"
GUARD = 20  # hang guard only

GOOD = ("cpuset:0", "cpuset:1", "cpuset:0-1", "cpuset:2", "cpuset:1-2")
BAD: tuple[dict[str, Any], ...] = (
    {"reservedResources": {"cpu": "banana"}},  # refused by loading (schema)
    {"reservedResources": {"cpu": "cpuset:99"}},  # refused by the policy (not on this node)
    {"reservedResources": {"cpu": "1"}, "pinCPU": "yes"},  # YAML 1.1 boolean
    {"reservedResources": {"cpu": "1"}, "noSuchKey": 1},  # unknown key
)


def cr(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "config.nri/v1alpha1", "kind": "TopologyAwarePolicy",
            "metadata": {"name": "default", "namespace": NS}, "spec": spec}  # fmt: skip


def good(reserved: str) -> dict[str, Any]:
    return cr({"reservedResources": {"cpu": reserved}})


def new_agent(client: KubeClient) -> ConfigAgent:
    return ConfigAgent(client, namespace=NS, node_name=NODE, policy_name="topology-aware",
                       backoff=lambda: Backoff(initial=0.01, maximum=0.05),
                       final_write_timeout=5)  # fmt: skip


async def start(nursery: trio.Nursery, agent: ConfigAgent, host_root: Path) -> ResourceManager:
    options = Options(policy="topology-aware", node_name=NODE, config_namespace=NS,
                      host_root=str(host_root))  # fmt: skip

    def build(doc: PolicyDocument) -> ResourceManager:
        return make_manager(options, doc)

    with trio.fail_after(GUARD):
        manager = await agent.initial_config(build)
    agent.attach(manager.reconfigure)
    await nursery.start(agent.serve)
    return manager


async def eventually(check: Callable[[], bool]) -> None:
    with trio.fail_after(GUARD):
        while not check():
            await trio.sleep(0.005)


def reserved(manager: ResourceManager) -> str | None:
    value = manager.spec.reserved_resources.cpu
    return None if value is None else value.text


def status(kube: FakeKube) -> tuple[str, int] | None:
    entry = kube.node_status(CRS, "default", NODE)
    return None if entry is None else (entry["status"], entry["generation"])


def generation(kube: FakeKube) -> int:
    obj = kube.get(CRS, "default")
    assert obj is not None
    return int(obj["metadata"]["generation"])


async def test_flapping_cr_keeps_the_last_good_config_and_status_follows_each_generation(
    fake: tuple[FakeKube, KubeClient], nursery: trio.Nursery, host_root: Path
) -> None:
    kube, client = fake
    kube.put(CRS, good(GOOD[0]))
    agent = new_agent(client)
    manager = await start(nursery, agent, host_root)
    in_force = GOOD[0]
    for n, (ok, bad) in enumerate(zip(GOOD[1:], BAD, strict=True)):
        kube.put(CRS, cr(bad))
        await eventually(lambda: status(kube) == ("Failure", generation(kube)))
        assert reserved(manager) == in_force, f"bad config {n} replaced {in_force}"
        entry = kube.node_status(CRS, "default", NODE)
        assert entry is not None and "spec." in entry["errors"]  # names the offending key

        kube.put(CRS, good(ok))
        await eventually(lambda: status(kube) == ("Success", generation(kube)))
        in_force = ok
        assert reserved(manager) == in_force
    assert (agent.applied, agent.rejected) == (1 + len(BAD), len(BAD))


async def test_rapid_flapping_settles_on_the_newest_generation(
    fake: tuple[FakeKube, KubeClient], nursery: trio.Nursery, host_root: Path
) -> None:
    kube, client = fake
    kube.put(CRS, good(GOOD[0]))
    manager = await start(nursery, new_agent(client), host_root)
    for round_ in range(20):  # no waiting between edits: the agent sees them in bursts
        kube.put(CRS, good(GOOD[round_ % len(GOOD)]))
        kube.put(CRS, cr(BAD[round_ % len(BAD)]))
    await eventually(lambda: status(kube) == ("Failure", generation(kube)))
    assert reserved(manager) in GOOD  # some good config, never a bad one
    kube.put(CRS, good("cpuset:3"))
    await eventually(lambda: status(kube) == ("Success", generation(kube)))
    assert reserved(manager) == "cpuset:3"


@attrs.define
class FaultyServer:
    """FakeKube behind a failing front: each fault fires for the next N matching requests."""

    kube: FakeKube
    list_errors: int = 0  # 500 on a list
    watch_errors: int = 0  # 503 on a watch
    watch_gone: int = 0  # 410 on a watch: the history is gone, relist
    status_conflicts: int = 0  # 409 on a status patch
    slow: int = 0  # replies delayed by ``delay``
    delay: float = 0.2
    drop_watch_after: int = 0  # every watch stream cut after this many events (0: never)
    seen: list[str] = attrs.field(factory=list)

    async def handle(self, req: Request) -> Reply:
        kind = _kind(req)
        self.seen.append(kind)
        if self.slow:
            self.slow -= 1
            await trio.sleep(self.delay)
        if kind == "list" and self.list_errors:
            self.list_errors -= 1
            return status_reply(500, "InternalError", "etcdserver: leader changed")
        if kind == "watch" and self.watch_errors:
            self.watch_errors -= 1
            return status_reply(503, "ServiceUnavailable", "apiserver is shutting down")
        if kind == "watch" and self.watch_gone:
            self.watch_gone -= 1
            return status_reply(410, "Gone", "too old resource version")
        if kind == "status" and self.status_conflicts:
            self.status_conflicts -= 1
            return status_reply(409, "Conflict", "the object has been modified")
        reply = await self.kube.handle(req)
        if kind == "watch" and self.drop_watch_after and reply.stream is not None:
            return attrs.evolve(reply, stream=_cut(reply.stream, self.drop_watch_after))
        return reply


def _kind(req: Request) -> str:
    if req.method == "PATCH":
        return "status"
    return "watch" if req.query.get("watch") == "true" else "list"


async def _cut(stream: AsyncIterator[bytes], after: int) -> AsyncIterator[bytes]:
    sent = 0
    async for line in stream:
        yield line
        sent += 1
        if sent >= after:
            raise DropConnection


async def test_agent_converges_through_api_server_faults(
    serve_fake: ServeFake, nursery: trio.Nursery, host_root: Path
) -> None:
    kube = FakeKube()
    server = FaultyServer(kube, list_errors=3, watch_errors=3, status_conflicts=3, slow=4,
                          drop_watch_after=1)  # fmt: skip
    _, client = await serve_fake(server.handle)
    kube.put(CRS, good(GOOD[0]))
    manager = await start(nursery, new_agent(client), host_root)
    await eventually(lambda: status(kube) == ("Success", 1))

    # More faults while the CR keeps changing; every watch is cut after one event, and one
    # reconnect finds its history gone, so the agent must relist (through 500s).
    server.watch_gone, server.list_errors, server.watch_errors = 1, 2, 2
    server.status_conflicts = 2
    for ok, bad in zip(GOOD[1:], BAD, strict=False):
        kube.put(CRS, good(ok))
        await eventually(lambda: status(kube) == ("Success", generation(kube)))
        assert reserved(manager) == ok
        kube.put(CRS, cr(bad))
        await eventually(lambda: status(kube) == ("Failure", generation(kube)))
        assert reserved(manager) == ok
    # Every fault fired, and the watch was re-established many times.
    faults_left = (server.watch_gone, server.list_errors, server.watch_errors,
                   server.status_conflicts)  # fmt: skip
    assert faults_left == (0, 0, 0, 0)
    assert server.seen.count("watch") > 2 * len(BAD)
