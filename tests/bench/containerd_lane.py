"""The containerd lane: the real containerd v2.2.9 creating containers, with each plugin.

One containerd per contender (none, ours, the Go stub plugin, Go topology-aware), each under
its own directory with its own NRI socket, all up at once; rounds of container lifecycles
rotate through them so that load from elsewhere hits every contender alike. The timer is
the CRI client's round trip around containerd's CreateContainer (StartContainer and
StopContainer too): what kubelet waits for, NRI plugin calls included. Each lifecycle is
create, start, stop (timeout 0: SIGKILL) and remove of a ``sleep`` container in one
BestEffort pod, at 0 and at ``LIVE`` other running containers in that pod.

Needs root and the cgroup v1 cpuset hierarchy, as ``tests/runtime`` does; the binaries come
from the same cache (``$NRI_RESMGR_CACHE/runtime``).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

from tests.bench import cri_client as cri
from tests.bench.contenders import PLUGIN_INDEX, Contender
from tests.bench.stats import ratio, summarize_ns
from tests.conformance.build import cache_dir
from tests.runtime.build import RUNTIME_PACKAGES, ensure_containerd, ensure_packages
from tests.runtime.containerd import Containerd, wait_for
from tests.runtime.cri import BESTEFFORT, Cri
from tests.runtime.ociimage import IMAGE_NAME, make_image

LEVELS = (0, 10)
NO_PLUGIN = "none"
OPS = ("create", "start", "stop")


@attrs.frozen
class Plan:
    levels: tuple[int, ...] = LEVELS
    rounds: int = 4
    batch: int = 15


class Lane:
    """A containerd of its own with (or without) one plugin connected, and one pod."""

    def __init__(self, contender: Contender | None, workdir: Path, bindir: Path) -> None:
        self.name = contender.name if contender else NO_PLUGIN
        self.contender = contender
        self.dir = workdir
        self.runtime = Containerd(bindir, workdir, IMAGE_NAME, shutil.which("runc") or "runc")
        self.cgroups = Cri(self.runtime, f"/nri-resmgr-bench-{secrets.token_hex(3)}", workdir)
        self.plugin: subprocess.Popen[bytes] | None = None
        self.client: cri.CriClient | None = None
        self.pod_id = ""
        self.pod: cri.PodSandboxConfig | None = None
        self.live: list[str] = []
        self.samples: dict[int, dict[str, list[int]]] = {}
        self._n = 0

    def start(self, image: Path) -> None:
        self.runtime.write_config()
        self.runtime.start()
        self.runtime.import_image(image)
        if self.contender is not None:
            self._start_plugin(self.contender)
        self.client = cri.CriClient(self.runtime.address)
        uid = str(uuid.uuid4())
        self.pod = cri.PodSandboxConfig(
            metadata=cri.PodSandboxMetadata(name="bench", uid=uid, namespace="default"),
            log_directory=str(self.dir / "logs" / uid),
            linux=cri.LinuxPodSandboxConfig(
                cgroup_parent=f"{self.cgroups.root}/kubepods/besteffort/pod{uid}",
                security_context=cri.LinuxSandboxSecurityContext(
                    cri.NamespaceOption(network=cri.NETWORK_NODE)
                ),
            ),
        )
        self.pod_id = self.client.run_pod(self.pod)

    def _start_plugin(self, contender: Contender) -> None:
        plugin_dir = self.dir / "plugin"
        plugin_dir.mkdir()
        argv = contender.argv(Path(self.runtime.nri_socket), plugin_dir)
        state = contender.state_dir(plugin_dir)
        if state is not None:
            # nri-plugins mounts a directory under its state dir into every container, and
            # containerd takes such a mount only from a shared or slave mount point (as in
            # its DaemonSet, where the state dir is a host path). Unmounted by the cleanup.
            subprocess.run(["mount", "--bind", str(state), str(state)], check=True)
            subprocess.run(["mount", "--make-rshared", str(state)], check=True)
        log = (plugin_dir / "plugin.log").open("ab")
        self.plugin = subprocess.Popen(argv, stdout=log, stderr=log, env=dict(os.environ))
        log.close()
        name = {"gostub": "bench-gostub"}.get(contender.impl, f"bench-{contender.impl}")
        pattern = re.compile(rf'plugin \\"{PLUGIN_INDEX}-{name}\\" connected')

        def connected() -> bool:
            if self.plugin is not None and self.plugin.poll() is not None:
                text = (plugin_dir / "plugin.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{self.name} exited {self.plugin.returncode}: {text}")
            return pattern.search(self.runtime.log_text()) is not None

        wait_for(f"{self.name} to connect to containerd", connected, timeout=120)

    def _config(self, name: str) -> cri.ContainerConfig:
        res = BESTEFFORT.linux()
        return cri.ContainerConfig(
            metadata=cri.ContainerMetadata(name=name),
            image=cri.ImageSpec(IMAGE_NAME),
            command=["/bin/sleep", "3600"],
            log_path=f"{name}.log",
            linux=cri.LinuxContainerConfig(
                cri.LinuxContainerResources(cpu_shares=int(str(res["cpu_shares"])))
            ),
        )

    def _create(self, name: str) -> tuple[str, int]:
        assert self.client is not None and self.pod is not None
        request = cri.CreateContainerRequest(self.pod_id, self._config(name), self.pod)
        reply, ns = self.client.timed("CreateContainer", request)
        return cri.IdReply().parse(reply).id, ns

    def populate(self, target: int) -> None:
        """Create and start (untimed) running containers until ``target`` are live."""
        assert self.client is not None
        while len(self.live) < target:
            cid, _ = self._create(f"live-{len(self.live)}")
            self.client.call("StartContainer", cri.ContainerId(cid))
            self.live.append(cid)

    def sample(self, count: int) -> None:
        """``count`` lifecycles at the current live level, create/start/stop timed."""
        assert self.client is not None
        out = self.samples.setdefault(len(self.live), {op: [] for op in OPS})
        for _ in range(count):
            self._n += 1
            cid, create_ns = self._create(f"sample-{self._n}")
            _, start_ns = self.client.timed("StartContainer", cri.ContainerId(cid))
            _, stop_ns = self.client.timed("StopContainer", cri.ContainerId(cid, timeout=0))
            self.client.call("RemoveContainer", cri.ContainerId(cid))
            out["create"].append(create_ns)
            out["start"].append(start_ns)
            out["stop"].append(stop_ns)

    def close(self) -> None:
        if self.client is not None:
            with contextlib.suppress(Exception):
                self.client.remove_pod(self.pod_id)
            self.client.close()
        if self.plugin is not None:
            self.plugin.terminate()
            try:
                self.plugin.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.plugin.kill()
                self.plugin.wait()
        self.runtime.cleanup()
        self.cgroups.remove_cgroups()


@contextlib.contextmanager
def open_lanes(contenders: list[Contender]) -> Iterator[list[Lane]]:
    ensure_packages(RUNTIME_PACKAGES)
    bindir = ensure_containerd()
    image = make_image(cache_dir() / "runtime" / "busybox-oci.tar")
    top = Path(f"/tmp/ncb-{secrets.token_hex(3)}")  # short: unix socket paths under it
    lanes = [Lane(None, top / "0", bindir)]
    lanes += [Lane(c, top / str(i), bindir) for i, c in enumerate(contenders, 1)]
    try:
        for lane in lanes:
            lane.dir.mkdir(parents=True)
            lane.start(image)
        yield lanes
    finally:
        for lane in lanes:
            with contextlib.suppress(Exception):
                lane.close()
        shutil.rmtree(top, ignore_errors=True)


def containerd_phase(contenders: list[Contender], plan: Plan) -> dict[str, Any]:
    """Every lane up, then per level: populate all, rotate ``rounds`` batches through them.
    Blocking (grpcio, subprocess): run it in a worker thread."""
    with open_lanes(contenders) as lanes:
        for level in plan.levels:
            for lane in lanes:
                lane.populate(level)
            for _ in range(plan.rounds):
                for lane in lanes:
                    lane.sample(plan.batch)
        return summarize(lanes)


def summarize(lanes: list[Lane]) -> dict[str, Any]:
    """Per op and level: each lane's summary and its median/p99 ratio to the lane without a
    plugin and to the Go stub plugin's lane."""
    out: dict[str, Any] = {}
    for op in OPS:
        by_level: dict[str, Any] = {}
        for level in sorted({lv for lane in lanes for lv in lane.samples}):
            rows: dict[str, dict[str, Any]] = {
                lane.name: dict(summarize_ns(lane.samples[level][op])) for lane in lanes
            }
            for base in (NO_PLUGIN, "gostub/fixed-cpus"):
                ref = rows.get(base)
                for name, row in rows.items():
                    if ref is None or name == base:
                        continue
                    row[f"vs {base}"] = [
                        ratio(float(row["median_us"]), float(ref["median_us"])),
                        ratio(float(row["p99_us"]), float(ref["p99_us"])),
                    ]
            by_level[str(level)] = rows
        out[op] = by_level
    return out
