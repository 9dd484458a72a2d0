"""A real kube-scheduler (v1.35, built by ``tests/dra/schedulerbuild.py``) on the test apiserver.

It is the DRA allocator of the chain tests: it reads our ResourceSlices, the DeviceClass and the
ResourceClaims, allocates devices to a pod's claims, writes ``status.allocation`` and
``reservedFor`` and binds the pod. Flags: ``--leader-elect=false`` (one scheduler, no lease) and
a loopback HTTPS port for its health endpoint; no feature gates (DRA is GA in 1.35 and the
DynamicResources plugin is on by default).

On a bare apiserver nobody plays kubelet or the node lifecycle controller, so
``schedulable_node`` writes what they would: a Ready condition, capacity, and no
``not-ready`` taint. With ``--leader-elect=false`` the scheduler exits 1 on SIGTERM ("finished
without leader elect"); that is its clean stop.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest

from nri_resmgr.kube import KubeClient
from nri_resmgr.kube.resources import NODES
from tests.dra.schedulerbuild import BuildError, ensure_scheduler
from tests.kube.apiserver import ApiServer, free_port, start_apiserver
from tests.kube.gobuild import KUBERNETES_VERSION
from tests.kube.versions import kube_versions
from tests.peers import missing_peer

READY_TIMEOUT = 60.0

__all__ = [
    "Scheduler",
    "schedulable_node",
    "scheduler_binary",
    "scheduler_versions",
    "start_scheduler",
]


scheduler_versions = kube_versions
"""The versions a real-scheduler test runs (``tests/kube/versions.py``)."""


def scheduler_binary(version: str = KUBERNETES_VERSION) -> Path:
    try:
        return ensure_scheduler(version)
    except BuildError as exc:
        missing_peer(f"kube-scheduler {version} cannot be built here: {exc}")


@attrs.define
class Scheduler:
    binary: Path
    log: Path
    port: int = attrs.field(factory=free_port)
    extra_args: tuple[str, ...] = ()
    """More flags, e.g. ``--config`` (which then wins over ``--kubeconfig``)."""
    _proc: subprocess.Popen[bytes] | None = None

    def start(self, kubeconfig: Path) -> None:
        argv = [str(self.binary), f"--kubeconfig={kubeconfig}", "--leader-elect=false",
                "--bind-address=127.0.0.1", f"--secure-port={self.port}", "-v=2",
                *self.extra_args]  # fmt: skip
        with self.log.open("ab") as out:
            self._proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        deadline = time.monotonic() + READY_TIMEOUT
        while not self._healthy():
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"kube-scheduler not healthy in {READY_TIMEOUT}s\n{self.tail()}")
            time.sleep(0.1)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def _healthy(self) -> bool:
        if self._proc is None or self._proc.poll() is not None:
            raise RuntimeError(f"kube-scheduler is not running\n{self.tail()}")
        try:
            # Its serving certificate is self-signed; /healthz is open to anonymous users.
            resp = httpx.get(f"https://127.0.0.1:{self.port}/healthz", verify=False, timeout=2)
        except httpx.TransportError:
            return False
        return resp.status_code == 200


def start_scheduler(server: ApiServer, log: Path, version: str = KUBERNETES_VERSION) -> Scheduler:
    """Builds (if needed) and starts kube-scheduler ``version`` against ``server``; fails the
    test under CI when it cannot be built (``tests/peers.py``), errors when it does not
    start."""
    scheduler = Scheduler(scheduler_binary(version), log)
    scheduler.start(server.kubeconfig)
    return scheduler


@contextlib.contextmanager
def scheduler_stack(
    tmp_path_factory: pytest.TempPathFactory, name: str, version: str
) -> Iterator[tuple[ApiServer, Scheduler]]:
    """kube-apiserver and kube-scheduler ``version`` on it, in directories named after
    ``name``; the scheduler stopped, then the API server, on the way out."""
    server = start_apiserver(tmp_path_factory.mktemp(f"{name}-apiserver"), version)
    try:
        log = tmp_path_factory.mktemp(f"{name}-scheduler") / "scheduler.log"
        scheduler = start_scheduler(server, log, version)
        try:
            yield server, scheduler
        finally:
            scheduler.stop()
    finally:
        server.shutdown()


async def schedulable_node(client: KubeClient, name: str, cpus: int = 16) -> dict[str, Any]:
    """Creates Node ``name`` as a kubelet and the node lifecycle controller leave it: Ready,
    with capacity, untainted (the apiserver adds ``node.kubernetes.io/not-ready`` to a new
    Node and, without a controller manager, nothing removes it)."""
    node = await client.create(NODES, {"metadata": {"name": name}})
    capacity = {"cpu": str(cpus), "memory": "64Gi", "pods": "110"}
    node["status"] = {
        "capacity": capacity,
        "allocatable": capacity,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "test node",
                        "lastHeartbeatTime": _now(), "lastTransitionTime": _now()}],
    }  # fmt: skip
    node = await client.replace(NODES, node, subresource="status")
    node["spec"]["taints"] = []
    updated: dict[str, Any] = await client.replace(NODES, node)
    return updated


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
