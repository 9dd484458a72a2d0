"""The memory offer chooses the pool (issue 14 item 8): a container whose memory limit no
NUMA node holds gets a pool whose nodes can hold it, CPUs and memory both (nri-plugins
``pools.go`` compareScores "memory offer burstability"), with the memory request estimated
from kubelet's oom_score_adj (``pkg/resmgr/cache/utils.go`` estimateResourceRequirements).

On n4c16 (2 packages x 2 NUMA nodes of 2 GiB): the level of the chosen pool, the NUMA nodes
of the CPUs granted and the memory nodes, per request.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.oomscore import (
    GUARANTEED_OOM_SCORE_ADJ,
    burstable_oom_score_adj,
    memory_request,
)
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from nri_resmgr.resmgr.model import Container, ContainerState
from nri_resmgr.sysfs import discover
from tests.policies.workload import Runtime, pod, resources, start, topology_spec
from tests.sysfs.fakesys import GIB, N4C16

M = 1000 * 1000  # Kubernetes' "M"
CAPACITY = 4 * 2 * GIB  # n4c16's memory: kubelet's capacity


def _container(name: str, qos: str, memory_request: int | None, limit: int) -> Container:
    """One container of a pod like upstream's e2e templates: 1 CPU requested, 2 the limit
    (Burstable), the memory limit ``limit`` (0: none) and kubelet's oom_score_adj for
    ``memory_request`` (None: no oom_score_adj reached the plugin)."""
    adj = None
    if qos == "guaranteed":
        adj = GUARANTEED_OOM_SCORE_ADJ
    elif memory_request is not None:
        adj = burstable_oom_score_adj(memory_request, CAPACITY)
    cpu_limit = 1000 if qos == "guaranteed" else 2000
    return Container(
        id=f"{name}c0",
        pod_id=f"sandbox-{name}",
        name=f"{name}c0",
        state=ContainerState.RUNNING,
        resources=resources(1000, cpu_limit, limit or None),
        oom_score_adj=adj,
    )


# (qos, memory request (None: no oom_score_adj), memory limit) -> pool level, CPU nodes, mems
CASES = {
    "limit-fits-a-node": ("burstable", 100 * M, 1500 * M, "numa", 1, 1),
    "limit-needs-a-socket": ("burstable", 100 * M, 2500 * M, "package", 2, 2),
    "limit-needs-the-machine": ("burstable", 200 * M, 5000 * M, "system", 4, 4),
    "no-limit-takes-the-most-memory": ("burstable", 200 * M, 0, "system", 4, 4),
    # Without an estimate the limit is the request: nothing to burst into, so the tightest
    # pool's CPUs and its offer widened to two nodes (as upstream without oom_score_adj).
    "no-oom-score-adj": ("burstable", None, 2500 * M, "numa", 1, 2),
    # Guaranteed: the request is the limit, the same.
    "guaranteed-over-a-node": ("guaranteed", None, 2500 * M, "numa", 1, 2),
}


@pytest.mark.parametrize(("qos", "mem_request", "limit", "level", "cpu_nodes", "mems"),
                         list(CASES.values()), ids=list(CASES))  # fmt: skip
def test_the_memory_offer_chooses_the_pool(
    tmp_path: Path,
    qos: str,
    mem_request: int | None,
    limit: int,
    level: str,
    cpu_nodes: int,
    mems: int,
) -> None:
    policy = TopologyAwarePolicy()
    start(policy, tmp_path, N4C16, topology_spec())
    system = discover(str(tmp_path))
    rt = Runtime(policy)
    p = pod("pod0", qos)
    c = rt.create((p, _container("pod0", qos, mem_request, limit)))
    granted = policy.engine.allocation(c.id)
    assert granted is not None
    engine = policy.engine
    assert engine.pools[engine.supply.index[granted.pool]].level == level
    assert len(system.nodes_of(CpuSet.parse(rt.cpus[c.id] or ""))) == cpu_nodes
    assert len(CpuSet.parse(rt.mems[c.id] or "")) == mems


def test_the_memory_request_sets_the_offer_not_the_limit(tmp_path: Path) -> None:
    """Upstream's test14: four Burstable containers whose limits sum past the machine's
    memory all fit by request, two on a socket each, two over the whole machine."""
    policy = TopologyAwarePolicy()
    start(policy, tmp_path, N4C16, topology_spec())
    rt = Runtime(policy)
    placed = []
    for i, (request, limit) in enumerate(
        [(100 * M, 2500 * M), (200 * M, 5000 * M), (100 * M, 2500 * M), (200 * M, 0)]
    ):
        c = rt.create(
            (pod(f"pod{i}", "burstable"), _container(f"pod{i}", "burstable", request, limit))
        )
        placed.append(len(CpuSet.parse(rt.mems[c.id] or "")))
    assert placed == [2, 4, 2, 4]


# -- the estimate itself ---------------------------------------------------------------------


@pytest.mark.parametrize("amount", [50 * M, 100 * M, 2500 * M, CAPACITY // 2])
def test_the_estimate_is_the_smallest_request_kubelet_maps_to_the_same_score(amount: int) -> None:
    adj = burstable_oom_score_adj(amount, CAPACITY)
    estimate = memory_request(adj, 0, CAPACITY)
    assert burstable_oom_score_adj(estimate, CAPACITY) == adj
    assert burstable_oom_score_adj(estimate - 1, CAPACITY) == adj + 1
    assert estimate <= amount < estimate + CAPACITY // 1000 + 1


@pytest.mark.parametrize(
    ("amount", "adj", "estimate"),
    [
        (0, 999, -(-CAPACITY // 1000)),  # kubelet's ceiling: below 1/1000 reads as 1/1000
        (CAPACITY - 1, 3, -(-997 * CAPACITY // 1000)),  # its floor: above 997/1000 as that
    ],
)
def test_kubelet_clamps_the_score_and_so_the_estimate(amount: int, adj: int, estimate: int) -> None:
    assert burstable_oom_score_adj(amount, CAPACITY) == adj
    assert memory_request(adj, 0, CAPACITY) == estimate


@pytest.mark.parametrize(
    ("adj", "limit", "capacity", "expected"),
    [
        (None, 0, CAPACITY, 0),  # no score reached the plugin
        (-997, 0, CAPACITY, 0),  # Guaranteed's score: not a Burstable estimate
        (1000, 0, CAPACITY, 0),  # BestEffort's
        (2, 0, CAPACITY, 0),  # below kubelet's Burstable range
        (500, 0, 0, 0),  # capacity unknown
        (500, 0, 1000 * M, 500 * M),
        (500, 600 * M, 1000 * M, 500 * M),
        (500, 500 * M, 1000 * M, 0),  # not below the limit: nri-plugins keeps the limit
        (3, 0, 1000 * M, 997 * M),
        (999, 0, 1000 * M, 1 * M),
    ],
)
def test_memory_request_follows_nri_plugins_rules(
    adj: int | None, limit: int, capacity: int, expected: int
) -> None:
    assert memory_request(adj, limit, capacity) == expected
