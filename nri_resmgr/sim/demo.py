"""``nri-resmgr demo``: the daemon's NRI path end to end, against the embedded runtime.

It starts the real NRI service and resource manager against the simulated runtime on a
temporary socket, runs a small mixed workload of pods through the runtime's relays, and
prints where each container ended up — including containers re-pinned by later ones.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path

import trio

from nri_resmgr.config.models import Constraints, PolicySpec, TemplateSpec
from nri_resmgr.nri import convert
from nri_resmgr.nri.service import NriService
from nri_resmgr.policies import create_policy
from nri_resmgr.resmgr.manager import ResourceManager
from nri_resmgr.resmgr.policy import PolicyEnv
from nri_resmgr.sim.demo_workload import WORKLOAD, demo_spec, workload_objects
from nri_resmgr.sim.runtime import Simulator
from nri_resmgr.sim.synthetic import TOPOLOGIES, write_sysfs
from nri_resmgr.sysfs import discover

POLICIES = ("topology-aware", "balloons", "template")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="nri-resmgr demo", description=__doc__)
    p.add_argument("--policy", choices=POLICIES, default="topology-aware")
    p.add_argument(
        "--machine",
        default="n4c16",
        choices=["host", *sorted(TOPOLOGIES)],
        help="a synthetic machine (n4c16: 2 sockets x 2 NUMA x 2 cores x 2 threads) "
        "or 'host' for this one",
    )
    return p.parse_args(argv)


def spec_for(policy_name: str) -> PolicySpec:
    if policy_name == "template":
        return TemplateSpec(reserved_resources=Constraints.of(cpu="750m"))
    return demo_spec(policy_name)


async def place_workload(policy_name: str, host_root: str, workdir: Path) -> list[list[str]]:
    """Runs the workload through simulator → NRI → manager → policy; one row per container."""
    manager = ResourceManager(
        create_policy(policy_name), spec_for(policy_name), PolicyEnv(host_root=host_root)
    )
    socket = str(workdir / "nri.sock")
    service = NriService(manager, socket, "resource-manager", "90", env={})
    rows: list[list[str]] = []
    async with Simulator.listen(socket) as sim, trio.open_nursery() as nursery:
        await nursery.start(service.serve)
        await sim.wait_plugin()
        placed: list[tuple[str, str, str, str, str]] = []
        for namespace, name, qos, milli_cpu, limit in WORKLOAD:
            pod, ctr = workload_objects(namespace, name, qos, milli_cpu, limit)
            pod_msg, ctr_msg = convert.pod_to_proto(pod), convert.container_to_proto(ctr)
            await sim.run_pod_sandbox(pod_msg)
            rsp = await sim.create_container(pod_msg, ctr_msg)
            await sim.start_container(pod_msg, ctr_msg)
            at_create = rsp.adjust.linux.resources.cpu.cpus or "(unchanged)"
            placed.append((f"{namespace}/{name}", qos, str(milli_cpu), at_create, ctr.id))
        for label, qos, request, at_create, ctr_id in placed:
            cpu = sim.containers[ctr_id].linux.resources.cpu
            rows.append([label, qos, request, at_create, cpu.cpus or "-", cpu.mems or "-"])
        await service.stop()
    return rows


def render(title: str, rows: list[list[str]]) -> str:
    header = ["container", "qos", "mCPU", "cpus at create", "cpus now", "mems"]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [title, "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


async def run_demo(policy_name: str, machine: str) -> str:
    with tempfile.TemporaryDirectory(prefix="nri-resmgr-demo-") as tmp:
        workdir = Path(tmp)
        host_root = (
            "" if machine == "host" else str(write_sysfs(workdir / "root", TOPOLOGIES[machine]))
        )
        system = discover(host_root)
        nodes = ", ".join(f"node{n.id}: cpus {n.cpus}" for n in system.nodes.values())
        title = (
            f"policy {policy_name} on {'this machine' if machine == 'host' else machine}"
            f" ({len(system.online)} CPUs; {nodes}); placed through NRI by the simulated "
            "runtime"
        )
        return render(title, await place_workload(policy_name, host_root, workdir))


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    print(trio.run(run_demo, args.policy, args.machine))
    return 0
