"""One real node at a time for a test session: a guest of the topology asked for, booted on
first use, with containerd running, the test image imported and upstream's control-plane
pods in place (they are there before any plugin starts, as on upstream's kubeadm VMs).

Asking for another topology powers the current guest off first: two TCG guests at once
would only slow both down on a shared machine.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import statistics
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nri_resmgr.sim.synthetic import Layout
from tests.node.cri import container_config, sandbox_config
from tests.node.guest import Guest, HungKernel
from tests.node.node import Node
from tests.node.pods import Pods, kube_pod
from tests.node.replay import GuestRuntime, policy_document
from tests.policies.replay.vm import VmTopology

CONTROL_PLANE_NAMESPACE = "kube-system"
# Passed on to the daemon when the test sets them (upstream's chart sets ENABLE_TEST_APIS).
DAEMON_ENV = ("ENABLE_TEST_APIS",)


def same_machine(topology: VmTopology, asked: Any) -> bool:
    """Whether a scenario's machine (a replay VmTopology or a synthetic Layout) is the
    guest's: same CPUs per package and NUMA node, same memory nodes."""
    if isinstance(asked, VmTopology):
        return asked == topology
    if isinstance(asked, Layout):
        cpu_nodes = {c.node for c in topology.cpus}
        return (
            asked.cpu_count == len(topology.cpus)
            and asked.packages == len({c.package for c in topology.cpus})
            and asked.packages * asked.dies * asked.nodes_per_die == len(cpu_nodes)
            and len(asked.memory_nodes) == len(topology.nodes) - len(cpu_nodes)
            and not asked.isolated
            and not asked.cpu_ids
        )
    return False


class NodeSession:
    def __init__(self, topology: VmTopology, name: str, workdir: Path) -> None:
        self.topology = topology
        self.name = name
        self.workdir = workdir
        self.memory = sum(topology.node_memory.values())
        """The node's memory, as kubelet's capacity (the Burstable oom_score_adj)."""
        self.guest = Guest.start(topology, workdir)
        try:
            self.node = Node.install(self.guest)
            self.node.start_containerd()
            self.node.import_image()
            self.control_plane = self._control_plane()
        except BaseException:
            self.guest.shutdown()  # no guest outlives a failed start
            raise
        self.runtimes: list[GuestRuntime] = []
        self.record: list[dict[str, Any]] = []

    def _control_plane(self) -> set[str]:
        """kubeadm's kube-system pods, as the replays create them; their CRI pod ids."""
        pods = []
        for name, cpu, mem, limit in (
            ("kube-apiserver", "250m", "", ""), ("kube-controller-manager", "200m", "", ""),
            ("kube-scheduler", "100m", "", ""), ("etcd", "100m", "100Mi", ""),
            ("coredns-a", "100m", "70Mi", "170Mi"), ("coredns-b", "100m", "70Mi", "170Mi"),
        ):  # fmt: skip
            made = kube_pod("burstable", name, self.memory, namespace=CONTROL_PLANE_NAMESPACE,
                            CPUREQ=cpu, CPULIM="", MEMREQ=mem, MEMLIM=limit)  # fmt: skip
            pods.append((sandbox_config(made.pod),
                         [container_config(c) for _, c in made.containers]))  # fmt: skip
        # No plugin runs yet: the order does not matter, so they are made concurrently.
        return {pod_id for pod_id, _ in self.node.start_pods(pods)}

    def pods(self) -> Pods:
        """A fresh set of hand-made pods on this node."""
        return Pods(self.node, self.memory)

    # -- between scenarios ----------------------------------------------------------------

    def reset(self) -> None:
        """The plugin stopped and every pod but the control plane's removed."""
        self.node.stop_plugin()
        for pod in self.node.pods():
            if pod["id"] not in self.control_plane:
                self.node.remove_pod(pod["id"])

    def start_ours(self, kind: str, values: Mapping[str, Any]) -> None:
        env = {k: os.environ[k] for k in DAEMON_ENV if k in os.environ}
        self.node.start_daemon(policy_document(kind, values), env=env)

    def replay_runtime(
        self, kind: str, values: Mapping[str, Any], machine: Any, refused: type[Exception]
    ) -> GuestRuntime:
        """The GUEST hook of the replays: a fresh start with this configuration."""
        if not same_machine(self.topology, machine):
            raise AssertionError(f"the scenario's machine is not this guest's ({self.name})")
        self.reset()
        self.start_ours(kind, values)
        runtime = GuestRuntime(self.node, refused)
        self.runtimes.append(runtime)
        return runtime

    def report(self, test: str, path: Path | None) -> None:
        """Append what the kernel showed at each check of the last test, as JSON lines."""
        if path is None:
            self.runtimes.clear()
            return
        with path.open("a") as f:
            for runtime in self.runtimes:
                names = {cid: c.name for cid, c in runtime.containers.items()}
                for seen in runtime.placements_read:
                    shown = {names.get(cid, cid): [k.cpus, k.mems] for cid, k in seen.items()}
                    f.write(json.dumps({"test": test, "guest": self.name, "kernel": shown}) + "\n")
        self.runtimes.clear()

    def close(self) -> None:
        rss = self.guest.qemu_rss()
        self.guest.shutdown()
        self.peak_rss = rss[1]


class Nodes:
    """The session's guests, one booted at a time."""

    def __init__(self) -> None:
        self.current: NodeSession | None = None
        self.closed: list[tuple[str, int, dict[str, list[float]]]] = []

    def get(self, topology: VmTopology, name: str) -> NodeSession:
        current = self.current
        if current is not None and current.topology == topology and not current.guest.hung:
            return current
        self.close()
        started = time.monotonic()
        self.current = self._start(topology, name)
        timings = self.current.node.timings
        timings["boot to agent"] = [self.current.guest.boot_seconds]
        timings["node ready"] = [time.monotonic() - started]
        return self.current

    @staticmethod
    def _start(topology: VmTopology, name: str) -> NodeSession:
        """A node session on a fresh guest; on another one if the first one's kernel locks
        up while the node is made (TCG, rarely: no test has used it yet)."""
        workdir = _new_workdir()
        try:
            return NodeSession(topology, name, workdir)
        except HungKernel as e:
            print(f"{e}\nthe {name} guest hung; starting another", file=sys.stderr)
            shutil.rmtree(workdir, ignore_errors=True)
        return NodeSession(topology, name, _new_workdir())

    def close(self) -> None:
        if self.current is not None:
            session, self.current = self.current, None
            try:
                session.close()
                self.closed.append((session.name, session.peak_rss, session.node.timings))
            finally:
                shutil.rmtree(session.workdir, ignore_errors=True)

    def summary(self) -> list[str]:
        """Per guest: qemu's peak RSS and each step's count and median time (figures for
        the record, never asserted: under TCG they swing with the host's load)."""
        lines = []
        for name, peak, timings in self.closed:
            steps = ", ".join(f"{what} {len(t)}x {statistics.median(t):.1f}s"
                              for what, t in timings.items())  # fmt: skip
            lines.append(f"node {name}: qemu peak RSS {peak / (1 << 20):.0f} MiB; {steps}")
        return lines


def _new_workdir() -> Path:
    """A fresh, short directory for one guest (unix socket paths are limited to 108 bytes)."""
    workdir = Path(f"/tmp/nrn-{secrets.token_hex(3)}")
    workdir.mkdir()
    return workdir
