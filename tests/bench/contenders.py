"""The contenders: NRI plugin processes, each driven by its own Go harness (a "lane").

Every contender gets the same policy configuration file (a TopologyAwarePolicy or
TemplatePolicy document, which both daemons read with ``--config-file``), the same harness
flags and the same workload.
"""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import attrs

from tests.bench import workload
from tests.bench.workload import JSON
from tests.conformance.peer import Harness, open_harness, run_process

PLUGIN_INDEX = "10"
# Generous, so that a slow Synchronize of 1,000 containers is measured rather than cut off.
HARNESS_FLAGS = {"registration_timeout": "60s", "request_timeout": "30s"}

TOPOLOGY_AWARE_CONFIG = """\
apiVersion: config.nri/v1alpha1
kind: TopologyAwarePolicy
metadata: {name: default}
spec:
  pinCPU: true
  pinMemory: true
  reservedResources: {cpu: 750m}
  instrumentation: {httpEndpoint: "", prometheusExport: false, samplingRatePerMillion: 0}
"""

TEMPLATE_CONFIG = """\
apiVersion: config.nri/v1alpha1
kind: TemplatePolicy
metadata: {name: default}
spec:
  reservedResources: {cpu: 750m}
"""

CONFIGS = {"topology-aware": TOPOLOGY_AWARE_CONFIG, "template": TEMPLATE_CONFIG}


@attrs.frozen
class Contender:
    """A plugin implementation with a policy: ``ours`` (``python -m nri_resmgr``), ``go``
    (the nri-plugins daemon) or ``gostub`` (the conformance suite's reference plugin on the
    bare Go NRI stub: pins every container to fixed CPUs, keeps no state; the cost of the
    Go transport alone)."""

    impl: str
    policy: str
    binary: Path | None = None  # the Go plugins'

    @property
    def name(self) -> str:
        return f"{self.impl}/{self.policy}"

    def argv(self, socket: Path, workdir: Path, profile_to: Path | None = None) -> list[str]:
        config = workdir / "config.yaml"
        config.write_text(CONFIGS.get(self.policy, ""))
        common = ["--config-file", str(config), "--nri-socket", str(socket)]
        common += ["--nri-plugin-name", f"bench-{self.impl}", "--nri-plugin-index", PLUGIN_INDEX]
        if self.impl == "gostub":
            assert self.binary is not None
            return [str(self.binary), "-socket", str(socket), "-name", "bench-gostub",
                    "-idx", PLUGIN_INDEX, "-cpus", "0-1", "-update-cpus", ""]  # fmt: skip
        if self.impl == "go":
            assert self.binary is not None
            state = workdir / "go-state"
            state.mkdir(exist_ok=True)
            return [str(self.binary), *common, "--pid-file", str(workdir / "go.pid"),
                    "--state-dir", str(state)]  # fmt: skip
        runner = [sys.executable]
        if profile_to is not None:
            runner += ["-m", "cProfile", "-o", str(profile_to)]
        kubelet = ["--kubelet-plugins-dir", str(workdir / "kubelet-plugins")]
        kubelet += ["--kubelet-registry-dir", str(workdir / "kubelet-registry")]
        return [*runner, "-m", "nri_resmgr", *common, *kubelet, "--log-level", "info"]


class Lane:
    """One contender's plugin process behind its own harness, with its live containers."""

    def __init__(
        self, contender: Contender, harness: Harness, pid: int, startup_s: float, ready: JSON
    ) -> None:
        self.contender = contender
        self.harness = harness
        self.pid = pid
        self.startup_s = startup_s
        """Process start to registered, configured and synchronized (5 ms resolution)."""
        self.ready = ready
        """The harness's wait-plugin reply, with the Synchronize records (``syncs``)."""
        self.live = 0
        self._next_sample = 1_000_000
        self._known_pods = 0

    async def populate(self, target: int) -> None:
        """Create (untimed) containers until ``target`` are live."""
        while self.live < target:
            n = self.live
            await self._ensure_pods(n)
            pod = workload.pod_of(n)
            ctr = workload.container(pod, n)
            await self.harness.relay("create-container", pod=pod, container=ctr)
            self.live += 1

    async def _ensure_pods(self, container_n: int) -> None:
        while self._known_pods <= container_n // workload.CONTAINERS_PER_POD:
            await self.harness.relay("run-pod", pod=workload.pod(self._known_pods))
            self._known_pods += 1

    async def sample_create(self, count: int) -> list[int]:
        """Times ``count`` CreateContainer relays (Go-side ns); each new container is
        removed again, untimed, so the live population stays where it is."""
        samples: list[int] = []
        await self._ensure_pods(0)  # a runtime always runs the pod first
        pods = self._known_pods
        for _ in range(count):
            n = self._next_sample
            self._next_sample += 1
            pod = workload.pod(n % pods)
            ctr = workload.container(pod, n)
            reply = await self.harness.relay("create-container", pod=pod, container=ctr)
            samples.append(int(reply["ns"]))
            await self.harness.relay("remove-container", pod=pod, container=ctr)
        return samples

    def rss_kib(self) -> int:
        return rss_kib(self.pid)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS in /proc/{pid}/status")


@asynccontextmanager
async def open_lane(
    contender: Contender,
    harness_binary: Path,
    workdir: Path,
    *,
    existing: tuple[Sequence[JSON], Sequence[JSON]] | None = None,
    profile_to: Path | None = None,
) -> AsyncIterator[Lane]:
    """Harness up (with ``existing`` pods/containers for the first Synchronize), then the
    plugin started and waited for until registered, configured and synchronized."""
    workdir.mkdir(parents=True, exist_ok=True)
    async with open_harness(harness_binary, workdir, **HARNESS_FLAGS) as harness:
        if existing is not None:
            await harness.sync_state(*existing)
        argv = contender.argv(harness.socket, workdir, profile_to)
        started = time.perf_counter()
        log_path = workdir / f"{contender.impl}-{contender.policy}.log"
        async with run_process(argv, log_path) as proc:
            ready = await harness.wait_plugin(timeout=120)
            lane = Lane(contender, harness, proc.pid, time.perf_counter() - started, ready)
            if existing is not None:
                lane.live = len(existing[1])
            yield lane
