"""The contenders: NRI plugin processes, each driven by its own Go harness (a "lane").

Every contender gets the same policy configuration file (a TopologyAwarePolicy or
TemplatePolicy document, which both daemons read with ``--config-file``), the same harness
flags and the same workload.
"""

from __future__ import annotations

import compileall
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import attrs

import nri_resmgr
from tests.bench import workload
from tests.bench.workload import JSON
from tests.conformance.peer import Harness, open_harness, run_process

PLUGIN_INDEX = "10"
# Generous, so that a slow Synchronize of 1,000 containers is measured rather than cut off.
# (The Go nri-plugins Synchronize of 1,000 took 16-28 s on a loaded 2-CPU machine, and once
# more than 30 s.)
HARNESS_FLAGS = {"registration_timeout": "60s", "request_timeout": "180s"}

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

    def state_dir(self, workdir: Path) -> Path | None:
        """Where the plugin keeps state on the filesystem: only the Go nri-plugins daemon
        does (its cache, written on every event); ours and the stub keep it in memory."""
        return workdir / "go-state" if self.impl == "go" else None

    def argv(self, socket: Path, workdir: Path) -> list[str]:
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
            assert state == self.state_dir(workdir)
            return [str(self.binary), *common, "--pid-file", str(workdir / "go.pid"),
                    "--state-dir", str(state)]  # fmt: skip
        runner = [sys.executable]
        kubelet = ["--kubelet-plugins-dir", str(workdir / "kubelet-plugins")]
        kubelet += ["--kubelet-registry-dir", str(workdir / "kubelet-registry")]
        return [*runner, "-m", "nri_resmgr", *common, *kubelet, "--log-level", "info"]


@attrs.define
class Lifecycles:
    """What a batch of container lifecycles measured, one entry per container."""

    create_ns: list[int] = attrs.Factory(list)
    stop_ns: list[int] = attrs.Factory(list)
    create_updates: list[int] = attrs.Factory(list)
    """Other containers' updates carried by each CreateContainer reply (the harness timer
    does not include a runtime applying them)."""
    stop_updates: list[int] = attrs.Factory(list)


class Lane:
    """One contender's plugin process behind its own harness, with its live containers."""

    def __init__(
        self,
        contender: Contender,
        harness: Harness,
        pid: int,
        startup_s: float,
        ready: JSON,
        workdir: Path,
    ) -> None:
        self.contender = contender
        self.workdir = workdir
        self.harness = harness
        self.pid = pid
        self.startup_s = startup_s
        """Process start to registered, configured and synchronized (5 ms resolution)."""
        self.ready = ready
        """The harness's wait-plugin reply, with the Synchronize records (``syncs``)."""
        self.live = 0
        self._next_sample = 1_000_000
        self._known_pods = 0

    def subscribes(self, event: str) -> bool:
        """Whether the plugin subscribed to ``event`` (e.g. ``StopContainer``): the runtime
        skips the call for a plugin that did not, and the harness times only the skip."""
        [plugin] = self.ready["plugins"]
        names = str(plugin.get("event_names", "")).replace("_", "").lower()
        return event.lower() in names

    async def populate(self, target: int) -> None:
        """Create and start (untimed) containers until ``target`` are live and running."""
        while self.live < target:
            n = self.live
            await self._ensure_pods(n)
            await self._start(workload.pod_of(n), n)
            self.live += 1

    async def _ensure_pods(self, container_n: int) -> None:
        while self._known_pods <= container_n // workload.CONTAINERS_PER_POD:
            await self.harness.relay("run-pod", pod=workload.pod(self._known_pods))
            self._known_pods += 1

    async def _start(self, pod: JSON, n: int) -> JSON:
        """CreateContainer (its reply returned) and the rest of a start, as containerd
        sends them: PostCreateContainer, StartContainer, PostStartContainer. The harness's
        adaptation passes each on only to plugins that subscribed to it."""
        created = workload.container(pod, n)
        reply = await self.harness.relay("create-container", pod=pod, container=created)
        await self.harness.relay("post-create-container", pod=pod, container=created)
        await self.harness.relay("start-container", pod=pod, container=created)
        running = workload.container(pod, n, state="CONTAINER_RUNNING")
        await self.harness.relay("post-start-container", pod=pod, container=running)
        return reply

    async def sample_lifecycle(self, count: int) -> Lifecycles:
        """``count`` whole container lifecycles, create → start → stop → remove, with
        CreateContainer and StopContainer timed (Go-side ns). Each container is gone again
        at the end, so the live population stays where it is, and every grant a plugin made
        has been released by the StopContainer a real runtime always sends first."""
        out = Lifecycles()
        await self._ensure_pods(0)  # a runtime always runs the pod first
        pods = self._known_pods
        for _ in range(count):
            n = self._next_sample
            self._next_sample += 1
            pod = workload.pod(n % pods)
            created = await self._start(pod, n)
            stopped = workload.container(pod, n, state="CONTAINER_STOPPED")
            stop = await self.harness.relay("stop-container", pod=pod, container=stopped)
            await self.harness.relay("remove-container", pod=pod, container=stopped)
            out.create_ns.append(int(created["ns"]))
            out.stop_ns.append(int(stop["ns"]))
            out.create_updates.append(len(created.get("update") or []))
            out.stop_updates.append(len(stop.get("update") or []))
        return out

    def rss_kib(self) -> int:
        return rss_kib(self.pid)


MEMORY_FILESYSTEMS = frozenset({"tmpfs", "ramfs", "devtmpfs"})


def state_location(contender: Contender, workdir: Path) -> str:
    """``in memory``, or the state directory with its filesystem, e.g. ``... (ext4, disk)``."""
    state = contender.state_dir(workdir)
    if state is None:
        return "in memory (no state directory)"
    fstype = filesystem_type(state)
    medium = "memory" if fstype in MEMORY_FILESYSTEMS else "disk"
    return f"{state} ({fstype}, {medium})"


def filesystem_type(path: Path) -> str:
    """The type of the filesystem mounted at the longest mount point above ``path``."""
    best, fstype = "", "unknown"
    resolved = str(path.resolve())
    for line in Path("/proc/mounts").read_text().splitlines():
        _, mount_point, kind, *_ = line.split()
        inside = resolved == mount_point or resolved.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) >= len(best):
            best, fstype = mount_point, kind
    return fstype


def compile_ours() -> None:
    """Bytecode for every nri_resmgr module, as the image has it (pip compiles the wheel it
    installs). A source checkout run with PYTHONDONTWRITEBYTECODE=1 (the image's setting,
    often the shell's too) otherwise compiles all ~140 modules from source on every start:
    0.1-0.2 s of the start-up this bench measures, which no deployment pays. Up-to-date
    files are only checked, not rewritten."""
    compileall.compile_dir(Path(nri_resmgr.__file__).parent, quiet=1)


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
) -> AsyncIterator[Lane]:
    """Harness up (with ``existing`` pods/containers for the first Synchronize), then the
    plugin started and waited for until registered, configured and synchronized."""
    workdir.mkdir(parents=True, exist_ok=True)
    async with open_harness(harness_binary, workdir, **HARNESS_FLAGS) as harness:
        if existing is not None:
            await harness.sync_state(*existing)
        argv = contender.argv(harness.socket, workdir)
        if contender.impl == "ours":
            compile_ours()
        started = time.perf_counter()
        log_path = workdir / f"{contender.impl}-{contender.policy}.log"
        async with run_process(argv, log_path) as proc:
            ready = await harness.wait_plugin(timeout=240)
            startup_s = time.perf_counter() - started
            lane = Lane(contender, harness, proc.pid, startup_s, ready, workdir)
            if existing is not None:
                lane.live = len(existing[1])
            yield lane
