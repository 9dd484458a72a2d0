"""One node agent of the fleet, as light as is honest.

Each agent is the daemon's own cluster-facing parts, wired as ``nri_resmgr.app`` wires them:
its own ``KubeClient`` (its own connections and credentials), the config agent (config CR in
force, status), a real ``ResourceManager`` with the policy on a synthetic machine, the
ResourceSlice publisher (devices from the policy) and the NodeResourceTopology writer (zones
from the policy). What is left out: NRI (no containers run, so nothing changes placement but
the configuration) and the kubelet plugin sockets (the publisher is started directly, as the
plugin starts it once kubelet registered it).

One deviation from the daemon: ``CLIENT_TIMEOUT``. Hundreds of agents share a Python process
here, and the two shared cores of this machine: while one agent builds its policy the others
wait behind it, and with the daemon's 10 s their connects and replies time out on the
harness' own CPU, not the API server's, and turn into retries no real node would make.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from nri_resmgr.agent.agent import ConfigAgent
from nri_resmgr.agent.report import ATTRIBUTE_PREFIX
from nri_resmgr.app import make_manager, report_in_nrt
from nri_resmgr.cli import Options
from nri_resmgr.config.models import PolicySpec
from nri_resmgr.dra.cpu.driver import driver_name_for, slice_device
from nri_resmgr.dra.kubeletplugin import Device, SlicePublisher
from nri_resmgr.instrumentation.metrics import ChangeSignal
from nri_resmgr.kube import ClusterConfig, KubeClient
from nri_resmgr.observability.nrt import NrtExporter
from nri_resmgr.observability.setup import ManagerSource
from nri_resmgr.resmgr.manager import ResourceManager

CLIENT_TIMEOUT = 60.0
"""Seconds for a connect or a reply (the daemon: 10), see the module's docstring."""
SYNC_TIMEOUT = 120.0
"""The publisher's limit on one sync (the daemon: 20), for the same reason."""


class FleetAgent:
    def __init__(
        self, config: ClusterConfig, node: str, namespace: str, policy: str, host_root: str
    ) -> None:
        self.config = config
        self.node = node
        self.options = Options(policy=policy, node_name=node, host_root=host_root,
                               config_namespace=namespace)  # fmt: skip
        self.agent: ConfigAgent | None = None
        self.manager: ResourceManager | None = None
        self.publisher: SlicePublisher | None = None
        self.nrt: NrtExporter | None = None
        self.error: str | None = None

    async def run(self) -> None:
        """Runs until cancelled; an error ends only this agent (and is reported)."""
        try:
            await self._run()
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"

    async def _run(self) -> None:
        assert self.options.policy is not None
        async with KubeClient(self.config, timeout=CLIENT_TIMEOUT) as client:
            agent = self.agent = ConfigAgent(
                client,
                namespace=self.options.config_namespace,
                node_name=self.node,
                policy_name=self.options.policy,
            )
            async with agent.following():  # as nri_resmgr.app.run: one set of watches
                manager = await agent.initial_config(lambda doc: make_manager(self.options, doc))
                self.manager = manager
                agent.attach(manager.reconfigure)
                changes = ChangeSignal()

                async def devices() -> list[Device]:  # as CpuDriver.devices, without claims
                    return [slice_device(d) for d in await manager.dra_devices()]

                publisher = self.publisher = SlicePublisher(
                    client, devices, driver_name_for(manager.policy.name), self.node,
                    node=agent.node, sync_timeout=SYNC_TIMEOUT,
                )  # fmt: skip
                manager.reconfigure_hooks.append(_after_applied(publisher.trigger, changes.notify))
                self.nrt = NrtExporter(client, self.node, ManagerSource(manager), changes.wait)
                report_in_nrt(agent, [self.nrt])
                async with trio.open_nursery() as nursery:  # in the daemon's order
                    await nursery.start(self.nrt.serve)
                    await nursery.start(agent.serve)
                    await nursery.start(publisher.run)

    def state(self) -> dict[str, Any]:
        """What the harness reads: configuration in force and reported, slices, NRT."""
        agent, publisher, nrt = self.agent, self.publisher, self.nrt
        applied = agent.doc.generation if agent and agent.doc else None
        written = agent.status.written if agent else {}
        reported = next(
            (e["generation"] for e in written.values() if e and e.get("status") == "Success"),
            None,
        )
        in_nrt = nrt_generation(nrt)
        if in_nrt is not None:  # reported in the NRT: only once that is written
            reported = in_nrt
        return {
            "applied": applied,
            "reported": reported,
            "status_writes": agent.status.writes if agent else 0,
            "status_failures": agent.status.failures if agent else 0,
            "status_conflicts": agent.status.conflicts if agent else 0,
            "status_events": getattr(getattr(agent, "events", None), "created", 0),
            "slices": bool(publisher and publisher.syncs and publisher.last_error is None),
            "slice_syncs": publisher.syncs if publisher else 0,
            "slice_failures": publisher.failures if publisher else 0,
            "nrt_writes": nrt.writes if nrt else 0,
            "error": self.error,
        }


def nrt_generation(nrt: NrtExporter | None) -> int | None:
    """The config generation the node's NRT says it runs, as last written (None: no report)."""
    attributes = ((nrt.published if nrt else None) or {}).get("attributes") or []
    found = [a["value"] for a in attributes if a["name"] == f"{ATTRIBUTE_PREFIX}config-generation"]
    return int(found[0]) if found else None


def _after_applied(*calls: Callable[[], None]) -> Callable[[PolicySpec], Callable[[bool], None]]:
    """A reconfigure hook that calls ``calls`` once a configuration is applied (devices and
    zones may have changed), as ``nri_resmgr.dra.setup`` does for the publisher."""

    def hook(_spec: PolicySpec) -> Callable[[bool], None]:
        def finish(applied: bool) -> None:
            if applied:
                for call in calls:
                    call()

        return finish

    return hook
