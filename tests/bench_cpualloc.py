"""CPU allocator benchmark (figures, not assertions): the time to pick exclusive CPUs from a
fragmented free set, nri-plugins' rules (``cpuallocator``) against the old tightest-group
picker (``tight.pick_cpus``), on the 128-CPU bench machine and on s8c4k (4,096 CPUs)."""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from pathlib import Path

from nri_resmgr.cpus import Priority, allocate_cpus
from nri_resmgr.cpus.tight import pick_cpus
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.sim.synthetic import Layout, write_sysfs
from nri_resmgr.sysfs import System, discover

MACHINES = {
    "128 CPUs": Layout(packages=2, nodes_per_die=2, cores_per_node=16, threads=2),
    "s8c4k": Layout(packages=8, cores_per_node=512, threads=1),
}
SAMPLES = 40


def _bench(system: System) -> dict[str, float]:
    rng = random.Random(1)
    online = sorted(system.online)
    cases = []
    for _ in range(SAMPLES):
        free = CpuSet(c for c in online if rng.random() > 0.3)
        cases.append((free, rng.choice([1, 2, 4, 8])))
    out: dict[str, float] = {}
    for name, pick in (
        ("upstream_ms", lambda f, n: allocate_cpus(system, f, n, Priority.NONE)),
        ("upstream_prio_ms", lambda f, n: allocate_cpus(system, f, n, Priority.NORMAL)),
        ("old_ms", lambda f, n: pick_cpus(system, f, n)),
    ):
        times = []
        for free, count in cases:
            started = time.perf_counter()
            pick(free, count)
            times.append(time.perf_counter() - started)
        out[name] = round(statistics.median(times) * 1000, 3)
    return out


if __name__ == "__main__":
    for label, layout in MACHINES.items():
        with tempfile.TemporaryDirectory() as tmp:
            system = discover(str(write_sysfs(Path(tmp), layout)))
            print(label, _bench(system))
