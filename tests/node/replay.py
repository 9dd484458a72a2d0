"""The replays' runtime on the real node: the scenarios of ``tests/policies`` (upstream's
e2e tests, replayed in-process) run unchanged, with each pod going through CRI to the guest's
containerd, our daemon placing it over NRI, and each ``verify`` reading what the guest kernel
holds: the container cgroup's ``cpuset.cpus.effective``/``cpuset.mems.effective``, checked
against the process's own ``Cpus_allowed_list``/``Mems_allowed_list``.

A scenario module opts in through its ``GUEST`` hook (set by ``tests/node/conftest.py``); the
hook gets the policy kind, the configuration as helm would render it, the topology the
scenario assumes, and the exception type that means "the runtime refused the container".
Each scenario starts afresh as upstream's framework does: the previous scenario's pods are
removed, the daemon restarted with the new configuration; the control-plane pods stay.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import yaml

from nri_resmgr.resmgr.model import Container, Pod
from tests.node.cri import container_config, sandbox_config
from tests.node.guest import KernelPlacement
from tests.node.node import CriError, Node, refusal

API_VERSION = "config.nri/v1alpha1"
# Chart values bind the metrics endpoint to every address (":8891"); the guest has only
# loopback, and the rule is loopback only: say so explicitly.
HTTP_ENDPOINT = "127.0.0.1:8891"


def policy_document(kind: str, values: Mapping[str, Any]) -> str:
    """A policy CR as ``--config-file`` reads it, from a chart's rendered ``config``."""
    spec = json.loads(json.dumps(values))  # a deep copy
    instrumentation = spec.get("instrumentation")
    if isinstance(instrumentation, dict) and instrumentation.get("httpEndpoint"):
        instrumentation["httpEndpoint"] = HTTP_ENDPOINT
    doc = {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": "default"}, "spec": spec}
    return yaml.safe_dump(doc, sort_keys=False)


class GuestRuntime:
    """``tests.policies.workload.Runtime``'s interface, on the real node."""

    def __init__(self, node: Node, refused: type[Exception]) -> None:
        self.node = node
        self.refused = refused
        self.sandboxes: dict[str, tuple[str, dict[str, Any]]] = {}  # model pod id -> CRI
        self.real: dict[str, str] = {}  # model container id -> CRI container id
        self.pids: dict[str, int] = {}
        self.members: dict[str, set[str]] = {}  # model pod id -> its containers' model ids
        self.containers: dict[str, Container] = {}
        self.stopped: set[str] = set()
        self._seen: tuple[int, dict[str, KernelPlacement]] | None = None
        self._generation = 0
        self.placements_read: list[dict[str, KernelPlacement]] = []

    def create(self, pc: tuple[Pod, Container]) -> Container:
        p, c = pc
        self._generation += 1
        if p.id not in self.sandboxes:
            config = sandbox_config(p)
            self.sandboxes[p.id] = (self.node.run_pod(config), config)
        pod_id, pod_config = self.sandboxes[p.id]
        try:
            made = self.node.start_container(pod_id, pod_config, container_config(c))
        except CriError as e:
            raise self.refused(f"runtime: container creation failed: {refusal(str(e))}") from e
        self.real[c.id], self.pids[c.id] = made.id, made.pid
        self.members.setdefault(p.id, set()).add(c.id)
        self.containers[c.id] = c
        return c

    def stop(self, c: Container) -> None:
        """The container exits (kubelet keeps it, stopped)."""
        self._generation += 1
        self.node.stop_container(self.real[c.id])
        self.stopped.add(c.id)

    def remove(self, c: Container) -> None:
        self._generation += 1
        self.node.remove_container(self.real.pop(c.id))
        self.containers.pop(c.id)
        self.pids.pop(c.id)
        self.stopped.discard(c.id)
        pod = c.pod_id
        self.members[pod].discard(c.id)
        if not self.members[pod]:
            del self.members[pod]
            pod_id, _ = self.sandboxes.pop(pod)
            self.node.remove_pod(pod_id)

    def apply(self, updates: list[Any]) -> None:
        raise NotImplementedError("updates reach the real runtime over NRI")

    def kernel(self) -> dict[str, KernelPlacement]:
        """What the guest kernel holds for every running container, read once per change."""
        if self._seen is None or self._seen[0] != self._generation:
            running = {cid: pid for cid, pid in self.pids.items() if cid not in self.stopped}
            started = time.monotonic()
            found = self.node.guest.placements(running)
            self.node.timed("kernel read", started)
            for cid, k in found.items():
                if (k.cpus, k.mems) != (k.cpus_allowed, k.mems_allowed):
                    raise AssertionError(f"{self.containers[cid].name}: cgroup {k} disagrees"
                                         " with the process's allowed lists")  # fmt: skip
            self._seen = (self._generation, found)
            self.placements_read.append(found)
        return self._seen[1]

    @property
    def cpus(self) -> dict[str, str | None]:
        return {cid: k.cpus for cid, k in self.kernel().items()}

    @property
    def mems(self) -> dict[str, str | None]:
        return {cid: k.mems for cid, k in self.kernel().items()}
