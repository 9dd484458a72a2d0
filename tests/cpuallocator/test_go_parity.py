"""Our CPU allocator against nri-plugins' own ``pkg/cpuallocator`` (built from the published
release): the same sysfs tree, the same free sets, counts and priorities, the same answer.

The free sets are fragmented the way a busy node fragments them (whole cores, single
threads, whole NUMA nodes taken), so every step of the allocator is reached: idle packages,
cache groups (L3 complexes), idle cores, threads, and the priority ranking.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from nri_resmgr.cpus import Priority, allocate_cpus, topology_of
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.sysfs import System, discover
from tests.conformance.build import BuildError
from tests.cpuallocator.gopeer import ensure_goalloc, go_allocate
from tests.cpuallocator.machines import MACHINES, Machine
from tests.peers import missing_peer

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def goalloc() -> Path:
    try:
        return ensure_goalloc()
    except (BuildError, OSError) as exc:
        missing_peer(f"cannot build goalloc: {exc}")


def _fragmented(system: System, rng: random.Random) -> CpuSet:
    free = set(system.online)
    for _ in range(rng.randrange(0, 6)):
        cpu = rng.choice(sorted(system.online))
        how = rng.random()
        if how < 0.5:
            free -= set(system.cpus[cpu].threads)
        elif how < 0.8:
            free.discard(cpu)
        else:
            free -= set(system.nodes[system.cpus[cpu].node].cpus)
    return CpuSet(free)


def _requests(system: System, seed: int, n: int) -> list[tuple[CpuSet, int, Priority]]:
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        free = _fragmented(system, rng)
        if len(free) < 2:
            continue
        count = rng.choice([1, 2, 3, 4, rng.randrange(1, len(free)), len(free) // 2 or 1])
        out.append((free, min(count, len(free) - 1) or 1, rng.choice(list(Priority))))
    return out


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.name)
def test_allocations_match_nri_plugins_cpuallocator(
    machine: Machine, goalloc: Path, tmp_path: Path
) -> None:
    root = machine.write(tmp_path)
    system = discover(str(root))
    requests = _requests(system, len(machine.name), machine.requests)
    go_prios, answers = go_allocate(
        goalloc,
        root / "sys",
        [{"from": str(f), "count": n, "prio": p.name.lower()} for f, n, p in requests],
        machine.go_env,
    )
    ours = topology_of(system).priorities
    for prio, cpus in zip(("high", "normal", "low"), ours, strict=True):
        assert CpuSet.parse(go_prios.get(prio, "")) == cpus, f"{prio}-priority CPUs differ"
    mismatches = []
    for (free, count, prio), answer in zip(requests, answers, strict=True):
        assert "error" not in answer, answer
        mine = allocate_cpus(system, free, count, prio)
        if CpuSet.parse(answer["cpus"]) != mine:
            mismatches.append(f"{count} of {free} ({prio.name}): go {answer['cpus']}, ours {mine}")
    assert not mismatches, f"{len(mismatches)} of {len(requests)} differ:\n" + "\n".join(
        mismatches[:15]
    )
