"""Memory placement on the real kernel: with ``pinMemory`` each container's ``cpuset.mems``
is the memory of its pool; a memory limit larger than one NUMA node gets the wider zone
(the socket, or the whole machine) while the CPUs stay where they were granted; without
``pinMemory`` memory is left alone. On the guest with CPU-less HBM and PMEM nodes, the
memory-type annotation decides which of them a container's memory may use (upstream's
n6-hbm-cxl test01-memory-types, replayed)."""

from __future__ import annotations

from pathlib import Path

from nri_resmgr.cpuset import CpuSet
from tests.node.conftest import CORE, N6, boot
from tests.node.pods import Pods
from tests.node.replay import policy_document
from tests.node.session import Nodes
from tests.policies.replay.helm import helm_merge
from tests.policies.topology_aware_e2e import test_other_topologies as other
from tests.policies.topology_aware_e2e.scenario import CHART_DEFAULTS, KIND, helm_config
from tests.policies.topology_aware_e2e.topologies import N4C16, N6_HBM_CXL

SOCKETS = (CpuSet([0, 1]), CpuSet([2, 3]))
ALL_NODES = CpuSet([0, 1, 2, 3])


def nodes_of(cpus: CpuSet) -> CpuSet:
    return CpuSet(c // 4 for c in cpus)  # n4c16: CPUs 4n..4n+3 are NUMA node n


def run(nodes: Nodes, pin_memory: bool) -> Pods:
    session = boot(nodes, N4C16, "n4c16")
    session.reset()
    values = helm_merge(CHART_DEFAULTS, helm_config(PIN_MEMORY=pin_memory))
    session.node.start_daemon(policy_document(KIND, values))
    pods = session.pods()
    pods.create("guaranteed", "g2", CPU="2", MEM="100M")
    pods.create("guaranteed", "big", CPU="1", MEM="3G")  # more than a 2G node holds
    pods.create("burstable", "huge", CPUREQ="1", CPULIM="2", MEMREQ="100M", MEMLIM="5G")
    pods.create("besteffort", "be")
    return pods


@CORE
def test_pinned_memory_is_the_pools_and_a_large_limit_gets_a_wider_zone(nodes: Nodes) -> None:
    pods = run(nodes, pin_memory=True)
    seen = pods.kernel()
    cpus = {n: CpuSet.parse(k.cpus) for n, k in seen.items()}
    mems = {n: CpuSet.parse(k.mems) for n, k in seen.items()}
    # Exclusive CPUs in one node, memory from that node only.
    assert len(nodes_of(cpus["g2c0"])) == 1 and mems["g2c0"] == nodes_of(cpus["g2c0"]), seen
    # 3G does not fit a 2G node: the CPU stays in its node, memory spans its socket.
    assert len(cpus["bigc0"]) == 1, seen
    assert mems["bigc0"] in SOCKETS and nodes_of(cpus["bigc0"]).issubset(mems["bigc0"]), seen
    # A 5G limit fits no socket either: the whole machine's memory.
    assert mems["hugec0"] == ALL_NODES, seen
    # Every container's memory is its CPUs' nodes, or a pool around them.
    for name in seen:
        assert nodes_of(cpus[name]).issubset(mems[name]), (name, seen[name])
        assert mems[name] in (*(CpuSet([n]) for n in range(4)), *SOCKETS, ALL_NODES), name


def test_without_pin_memory_memory_is_left_alone(nodes: Nodes) -> None:
    pods = run(nodes, pin_memory=False)
    seen = pods.kernel()
    assert {n: k.mems for n, k in seen.items()} == {n: "0-3" for n in seen}, seen
    assert len(CpuSet.parse(seen["g2c0"].cpus)) == 2  # CPUs are still pinned


@N6
def test_memory_types_on_cpu_less_hbm_and_pmem_nodes(
    nodes: Nodes, replays: None, tmp_path: Path
) -> None:
    boot(nodes, N6_HBM_CXL, "n6-hbm-cxl")
    other.test01_memory_types(tmp_path)
