"""The daemon as a process in cluster mode against the real kube-apiserver."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from nri_resmgr.kube import KubeClient
from nri_resmgr.kube.resources import NAMESPACES, NODES, TEMPLATE_POLICIES
from tests.agent.test_agent_integration import cr, unique
from tests.kube.apiserver import ApiServer

pytestmark = pytest.mark.integration


class Daemon:
    def __init__(self, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.proc, self.log = proc, log

    @property
    def output(self) -> str:
        return self.log.read_text(errors="replace")

    async def wait_logged(self, needle: str, timeout: float = 60) -> None:
        with trio.fail_after(timeout):
            while needle not in self.output:
                assert self.proc.poll() is None, f"daemon exited:\n{self.output}"
                await trio.sleep(0.05)

    async def wait_exit(self, timeout: float = 60) -> int:
        with trio.fail_after(timeout):
            while self.proc.poll() is None:
                await trio.sleep(0.05)
        return self.proc.returncode


@contextmanager
def daemon(
    server: ApiServer,
    namespace: str,
    node: str,
    tmp_path: Path,
    *extra: str,
    policy: str = "template",
) -> Iterator[Daemon]:
    log = tmp_path / "daemon.log"
    args = [sys.executable, "-m", "nri_resmgr", "--policy", policy,
            "--kubeconfig", str(server.kubeconfig), "--config-namespace", namespace,
            "--nri-socket", str(tmp_path / "no-such.sock"), *extra]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"} | {"NODE_NAME": node}
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=out, env=env)
    try:
        yield Daemon(proc, log)
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
async def admin(template_crd: ApiServer) -> AsyncIterator[tuple[KubeClient, str, str]]:
    async with admin_on(template_crd) as found:
        yield found


@asynccontextmanager
async def admin_on(server: ApiServer) -> AsyncIterator[tuple[KubeClient, str, str]]:
    """An admin client, a fresh namespace and a fresh Node (deleted after)."""
    async with KubeClient(server.config()) as client:
        namespace, node = unique("proc"), unique("node")
        await client.create(NAMESPACES, {"metadata": {"name": namespace}})
        await client.create(NODES, {"metadata": {"name": node}})
        yield client, namespace, node
        await client.delete(NODES, node)


async def entry(client: KubeClient, ns: str, name: str, node: str) -> dict[str, Any] | None:
    got = await client.get(TEMPLATE_POLICIES, name, ns)
    found: dict[str, Any] | None = ((got.get("status") or {}).get("nodes") or {}).get(node)
    return found


async def wait_entry(
    client: KubeClient, ns: str, node: str, expected: tuple[str, int] | None
) -> dict[str, Any] | None:
    with trio.fail_after(60):
        while True:
            got = await entry(client, ns, "default", node)
            if (None if got is None else (got["status"], got["generation"])) == expected:
                return got
            await trio.sleep(0.05)


async def test_cluster_mode_applies_edits_and_clears_status_on_sigterm(
    template_crd: ApiServer, admin: tuple[KubeClient, str, str], tmp_path: Path
) -> None:
    client, ns, node = admin
    await client.create(TEMPLATE_POLICIES, cr("default", "750m"), ns)
    with daemon(template_crd, ns, node, tmp_path) as d:
        await wait_entry(client, ns, node, ("Success", 1))
        await d.wait_logged("started config-agent")
        await client.patch(TEMPLATE_POLICIES, "default", {"spec": {"reservedResources":
                                                                  {"cpu": "2"}}}, ns)  # fmt: skip
        await wait_entry(client, ns, node, ("Success", 2))
        await d.wait_logged(f"{ns}/default generation 2 applied")
        d.proc.send_signal(signal.SIGTERM)
        assert await d.wait_exit() == 0, d.output
    assert await entry(client, ns, "default", node) is None
    out = d.output
    assert "shutting down: received SIGTERM" in out
    assert out.index("stopping config-agent") < out.index("stopping nri")


async def test_bad_initial_config_exits_2_after_writing_failure(
    template_crd: ApiServer, admin: tuple[KubeClient, str, str], tmp_path: Path
) -> None:
    client, ns, node = admin
    bad = cr("default", "1", instrumentation={"reportPeriod": "soon"})
    await client.create(TEMPLATE_POLICIES, bad, ns)
    with daemon(template_crd, ns, node, tmp_path) as d:
        assert await d.wait_exit() == 2, d.output
    assert "configuration error: spec.instrumentation.reportPeriod" in d.output
    got = await wait_entry(client, ns, node, ("Failure", 1))
    assert got is not None and "spec.instrumentation.reportPeriod" in got["errors"]


async def test_sigterm_while_waiting_for_a_config_exits_0(
    template_crd: ApiServer, admin: tuple[KubeClient, str, str], tmp_path: Path
) -> None:
    _, ns, node = admin
    with daemon(template_crd, ns, node, tmp_path) as d:
        await d.wait_logged("no effective configuration")
        d.proc.send_signal(signal.SIGTERM)
        assert await d.wait_exit() == 0, d.output
    assert "received SIGTERM before start-up finished" in d.output
