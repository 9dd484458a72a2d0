"""Policy decision benchmarks (wired into ``nox -s bench`` by the lead).

Figures, not assertions: the time a policy takes to place one container while ``n_live``
containers are running, and to Synchronize 1,000 running containers after a restart.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from nri_resmgr.config.models import BalloonType, PolicySpec
from nri_resmgr.policies import create_policy
from nri_resmgr.resmgr.model import Container, Pod
from nri_resmgr.resmgr.policy import Policy, PolicyEnv
from tests.policies.workload import (
    Runtime,
    balloons_spec,
    besteffort,
    burstable,
    guaranteed,
    topology_spec,
)
from tests.sysfs.fakesys import Layout, write_sysfs

BENCH_MACHINE = Layout(packages=2, nodes_per_die=2, cores_per_node=16, threads=2)
"""128 CPUs: 2 packages x 2 NUMA nodes x 16 cores x 2 threads."""
S8C4K = Layout(packages=8, cores_per_node=512, threads=1)
"""nri-plugins' s8c4k e2e machine with all 4,096 CPUs online: 8 packages of 512 cores."""
MACHINES = {"128 CPUs": BENCH_MACHINE, "s8c4k": S8C4K}
SAMPLES = 200
SYNC_CONTAINERS = 1000


def _spec(policy_name: str) -> PolicySpec:
    if policy_name == "balloons":
        return balloons_spec(
            reserved="2",
            balloon_types=(
                BalloonType(name="dedicated", namespaces=("dedicated-*",), max_cpus=8),
                BalloonType(name="shared", namespaces=("*",), max_balloons=2),
            ),
        )
    if policy_name == "topology-aware":
        return topology_spec(reserved="2")
    raise ValueError(f"no benchmark spec for policy {policy_name!r}")


def _workload(i: int) -> tuple[Pod, Container]:
    """Mostly shared containers, some sub-CPU, a few exclusive (the usual node mix)."""
    kind = i % 20
    if kind == 0:
        return guaranteed(f"g{i}", 1000, namespace="dedicated-a")
    if kind < 8:
        return burstable(f"b{i}", 10, 100)
    return besteffort(f"e{i}")


def _policy(policy_name: str, root: Path) -> Policy:
    policy = create_policy(policy_name)
    policy.setup(_spec(policy_name), PolicyEnv(host_root=str(root)))
    return policy


def bench_policy(
    policy_name: str, n_live: int = 500, machine: str = "128 CPUs"
) -> dict[str, float | int | str]:
    layout = MACHINES[machine]
    with tempfile.TemporaryDirectory(prefix="nri-resmgr-bench-") as tmp:
        root = write_sysfs(Path(tmp), layout)
        rt = Runtime(_policy(policy_name, root))
        for i in range(n_live):
            rt.create(_workload(i))
        decisions: list[float] = []
        cpu_seconds = 0.0
        for i in range(n_live, n_live + SAMPLES):
            cpu_started = time.process_time()
            started = time.perf_counter()
            c = rt.create(_workload(i))
            decisions.append(time.perf_counter() - started)
            cpu_seconds += time.process_time() - cpu_started
            rt.remove(c)

        big = Runtime(_policy(policy_name, root))
        for i in range(SYNC_CONTAINERS):
            big.create(_workload(i))
        pods, containers = big.reported()
        restarted = _policy(policy_name, root)
        started = time.perf_counter()
        updates = restarted.synchronize(pods, containers)
        sync_seconds = time.perf_counter() - started

    decisions.sort()
    return {
        "policy": policy_name,
        "machine": machine,
        "cpus": layout.cpu_count,
        "live_containers": n_live,
        "create_ms_mean": round(statistics.fmean(decisions) * 1000, 3),
        # CPU time (process_time: this process only) is what a loaded machine distorts least.
        "create_cpu_ms_mean": round(cpu_seconds / SAMPLES * 1000, 3),
        "create_ms_p95": round(decisions[int(len(decisions) * 0.95) - 1] * 1000, 3),
        "synchronize_containers": SYNC_CONTAINERS,
        "synchronize_ms": round(sync_seconds * 1000, 1),
        "synchronize_updates": len(updates),
    }


if __name__ == "__main__":
    import sys

    for name in sys.argv[1:] or ["topology-aware"]:
        for machine in MACHINES:
            print(bench_policy(name, machine=machine))
