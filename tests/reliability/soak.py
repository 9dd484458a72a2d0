"""Memory soak: container create/remove cycles through the simulator against the real daemon.

    python -m tests.reliability.soak [--cycles N] [--warmup W]

Each cycle is a pod with one container, alternately Guaranteed (an exclusive CPU) and
BestEffort (the shared pool): RunPodSandbox, CreateContainer, StopContainer,
RemoveContainer, RemovePodSandbox, each with fresh ids, sent on the simulator's plugin
connection (the simulator does the handshake and Synchronize; the events are pre-encoded).
The daemon's RSS (/proc/<pid>/status) is read after the warm-up cycles and at the end; the
growth between them is the figure that matters.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import attrs
import trio

from nri_resmgr._gen.nri.pkg.api import v1alpha1 as api
from nri_resmgr.nri import convert
from nri_resmgr.nri.handlers import PLUGIN_SERVICE
from nri_resmgr.sim.connection import SimPlugin
from nri_resmgr.sim.runtime import Simulator
from nri_resmgr.sim.synthetic import N4C16, write_sysfs
from tests.policies.workload import resources
from tests.reliability.daemon_proc import daemon_process, rss_kib

GUARD = 60.0  # per 1,000 cycles: a hang guard, not a timing assertion
TIMEOUT = 10.0  # per request, as a runtime's request timeout


@attrs.frozen
class SoakResult:
    cycles: int
    warmup: int
    rss_start_kib: int
    rss_warm_kib: int
    rss_end_kib: int
    seconds: float

    @property
    def growth_kib(self) -> int:
        return self.rss_end_kib - self.rss_warm_kib

    def report(self) -> str:
        return (
            f"soak: {self.cycles} cycles in {self.seconds:.1f}s "
            f"({self.cycles / self.seconds:,.0f} cycles/s); daemon RSS "
            f"{self.rss_start_kib / 1024:.1f} MiB at start, {self.rss_warm_kib / 1024:.1f} MiB "
            f"after {self.warmup} warm-up cycles, {self.rss_end_kib / 1024:.1f} MiB at the end "
            f"(growth after warm-up {self.growth_kib / 1024:+.2f} MiB)"
        )


# Fixed-length placeholders: swapping them for real ids keeps every protobuf length valid.
POD_ID, CTR_ID, UID = b"P" * 16, b"C" * 16, b"U" * 16
EVENTS = ("RunPodSandbox", "CreateContainer", "StopContainer", "RemoveContainer",
          "RemovePodSandbox")  # fmt: skip


def _templates(qos: str) -> dict[str, bytes]:
    """Each event of one cycle, encoded once with placeholder ids (betterproto encoding is
    the slowest part of the simulator; the soak measures the daemon, not the encoder)."""
    parent = {"guaranteed": "kubepods-pod", "besteffort": "kubepods-besteffort-pod"}[qos]
    pod = api.PodSandbox(
        id=POD_ID.decode(), name=f"soak-{qos}", namespace="default", uid=UID.decode(),
        linux=api.LinuxPodSandbox(cgroup_parent=f"{parent}{UID.decode()}.slice"),
    )  # fmt: skip
    request, limit = (1000, 1000) if qos == "guaranteed" else (0, None)
    wanted = convert.resources_to_proto(resources(request, limit))
    ctr = api.Container(
        id=CTR_ID.decode(), pod_sandbox_id=POD_ID.decode(), name="c0",
        linux=api.LinuxContainer(resources=wanted),
    )  # fmt: skip
    return {
        "RunPodSandbox": bytes(api.RunPodSandboxRequest(pod=pod)),
        "CreateContainer": bytes(api.CreateContainerRequest(pod=pod, container=ctr)),
        "StopContainer": bytes(api.StopContainerRequest(pod=pod, container=ctr)),
        "RemoveContainer": bytes(api.RemoveContainerRequest(pod=pod, container=ctr)),
        "RemovePodSandbox": bytes(api.RemovePodSandboxRequest(pod=pod)),
    }


TEMPLATES = {"guaranteed": _templates("guaranteed"), "besteffort": _templates("besteffort")}


async def cycle(plugin: SimPlugin, n: int) -> None:
    """One pod with one container, created and removed; Guaranteed and BestEffort alternate."""
    templates = TEMPLATES["guaranteed" if n % 2 else "besteffort"]
    ids = ((POD_ID, b"%016d" % n), (CTR_ID, b"c%015d" % n), (UID, b"u%015d" % n))
    for event in EVENTS:
        payload = templates[event]
        for placeholder, real in ids:
            payload = payload.replace(placeholder, real)
        reply = await plugin.client.call_raw(PLUGIN_SERVICE, event, payload, TIMEOUT)
        if event == "CreateContainer" and n % 100 == 0:
            cpus = api.CreateContainerResponse().parse(reply).adjust.linux.resources.cpu.cpus
            if not cpus:
                raise AssertionError(f"cycle {n}: the daemon gave the container no cpuset")


async def discard_updates(sim: Simulator) -> None:
    while True:
        await sim.next_update()


async def soak(workdir: Path, cycles: int, warmup: int) -> SoakResult:
    socket = str(workdir / "nri.sock")
    host_root = write_sysfs(workdir / "host", N4C16)
    async with Simulator.listen(socket) as sim, trio.open_nursery() as nursery:
        nursery.start_soon(discard_updates, sim)
        with daemon_process(workdir, socket, host_root) as proc:
            with trio.fail_after(GUARD):
                plugin = await sim.wait_plugin()
            start_rss = rss_kib(proc.pid)
            with trio.fail_after(GUARD * (1 + warmup / 1000)):
                for n in range(warmup):
                    await cycle(plugin, n)
            warm_rss = rss_kib(proc.pid)
            began = time.perf_counter()
            with trio.fail_after(GUARD * (1 + cycles / 1000)):
                for n in range(warmup, warmup + cycles):
                    await cycle(plugin, n)
            seconds = time.perf_counter() - began
            end_rss = rss_kib(proc.pid)
            if plugin.closed.is_set() or proc.poll() is not None:
                raise AssertionError("the daemon's NRI connection did not survive the soak")
        nursery.cancel_scope.cancel()
    return SoakResult(cycles, warmup, start_rss, warm_rss, end_rss, seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=100_000)
    parser.add_argument("--warmup", type=int, default=1_000)
    parser.add_argument("--max-growth-mib", type=float, default=20.0)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="soak-", dir="/tmp"))
    try:
        result = trio.run(soak, workdir, args.cycles, args.warmup)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(result.report(), flush=True)
    if result.growth_kib > args.max_growth_mib * 1024:
        print(f"FAIL: RSS grew more than {args.max_growth_mib} MiB", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
