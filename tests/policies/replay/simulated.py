"""The runtime side of a scenario through the project's NRI stack: the in-repo runtime
simulator (``sim/runtime.py``) talks NRI over a unix socket to ``NriService``, whose
``ResourceManager`` runs the policy under test. Trio runs in a helper thread so the
scenarios' steps stay plain calls."""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trio
import trio.from_thread

from nri_resmgr._gen.nri.pkg.api import v1alpha1 as api
from nri_resmgr.config.models import PolicySpec
from nri_resmgr.nri import convert
from nri_resmgr.nri.errors import RpcError
from nri_resmgr.resmgr.manager import ResourceManager
from nri_resmgr.resmgr.model import Container, Pod, Update
from nri_resmgr.resmgr.policy import Policy, PolicyEnv
from nri_resmgr.sim.runtime import Simulator
from tests.nri.helpers import running_service

T = TypeVar("T")
GUARD = 120  # a hang guard only, for the whole replay


class SimulatedRuntime:
    """Same interface as ``tests.policies.workload.Runtime``, over the simulator."""

    def __init__(
        self,
        policy: Policy,
        spec: PolicySpec,
        host_root: str,
        refused: type[Exception] = RuntimeError,
    ) -> None:
        """``refused``: what ``create`` raises when the plugin fails the creation."""
        self.policy = policy
        self.refused = refused
        self.pods: dict[str, Pod] = {}
        self.containers: dict[str, Container] = {}
        self._protos: dict[str, tuple[api.PodSandbox, api.Container]] = {}
        self.stopped: set[str] = set()
        self._dir = tempfile.mkdtemp(prefix="nri-b-", dir="/tmp")
        self._ready = threading.Event()
        self._stop: trio.Event | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self.sim: Simulator | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._main, args=(spec, host_root), daemon=True, name="simulated-runtime"
        )
        self._thread.start()
        self._ready.wait(GUARD)
        if self.error is not None:
            raise self.error

    def _main(self, spec: PolicySpec, host_root: str) -> None:
        try:
            trio.run(self._serve, spec, host_root)
        except BaseException as e:  # reported to the test thread
            self.error = e
            self._ready.set()

    async def _serve(self, spec: PolicySpec, host_root: str) -> None:
        manager = ResourceManager(self.policy, spec, PolicyEnv(host_root=host_root))
        path = str(Path(self._dir) / "nri.sock")
        self._stop = trio.Event()
        self._token = trio.lowlevel.current_trio_token()
        with trio.fail_after(GUARD):
            async with Simulator.listen(path) as sim, running_service(manager, path):
                await sim.wait_plugin()
                self.sim = sim
                self._ready.set()
                await self._stop.wait()

    def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return trio.from_thread.run(fn, *args, trio_token=self._token)

    def close(self) -> None:
        if self._stop is not None and self._thread.is_alive():
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join(GUARD)

    def create(self, pc: tuple[Pod, Container]) -> Container:
        p, c = pc
        sim = self.sim
        assert sim is not None
        if p.id not in self.pods:
            self._run(sim.run_pod_sandbox, convert.pod_to_proto(p))
        self.pods[p.id] = p
        pp, cp = sim.pods[p.id], convert.container_to_proto(c)
        try:
            self._run(sim.create_container, pp, cp)
        except RpcError as e:
            raise self.refused(f"runtime: container creation failed: {e}") from e
        self._run(sim.start_container, pp, cp)
        self.containers[c.id] = c
        self._protos[c.id] = (pp, cp)
        return c

    def stop(self, c: Container) -> None:
        """The container exits (kubelet keeps it, stopped)."""
        sim = self.sim
        assert sim is not None
        pp, cp = self._protos[c.id]
        self._run(sim.stop_container, pp, cp)
        self.stopped.add(c.id)

    def remove(self, c: Container) -> None:
        sim = self.sim
        assert sim is not None
        pp, cp = self._protos.pop(c.id)
        if c.id not in self.stopped:
            self._run(sim.stop_container, pp, cp)
        self.stopped.discard(c.id)
        self._run(sim.remove_container, pp, cp)
        del self.containers[c.id]

    def apply(self, updates: list[Update]) -> None:
        raise NotImplementedError("updates reach the simulated runtime over NRI")

    def _cpu(self, cid: str) -> api.LinuxCpu:
        sim = self.sim
        assert sim is not None
        return sim.containers[cid].linux.resources.cpu

    @property
    def cpus(self) -> dict[str, str | None]:
        return {cid: self._cpu(cid).cpus or None for cid in self._running()}

    @property
    def mems(self) -> dict[str, str | None]:
        return {cid: self._cpu(cid).mems or None for cid in self._running()}

    def _running(self) -> list[str]:
        return [cid for cid in self.containers if cid not in self.stopped]


def replay_simulated(
    scenario: Any, monkeypatch: pytest.MonkeyPatch, replay: Callable[[Path], None], tmp_path: Path
) -> None:
    """Run ``replay`` with ``scenario`` (a replay package's scenario module, with its
    ``SIMULATED`` switch and ``OPEN`` runtimes) sending pods through the simulated runtime;
    fails when the replay never opened one."""
    monkeypatch.setattr(scenario, "SIMULATED", True)
    try:
        replay(tmp_path)
        assert scenario.OPEN, "the replay did not go through the simulated runtime"
    finally:
        for runtime in scenario.OPEN:
            runtime.close()
        scenario.OPEN.clear()
