"""Discovery on sysfs trees not written by ``sim/synthetic.py``: one copied from a real
machine and four written by hand (``tests/sysfs/fixtures/*/sys``).

Every expectation below was read off the fixture files by hand (or, for the copied tree,
from ``lscpu`` on that machine), not computed by the code under test.
"""

from __future__ import annotations

from pathlib import Path

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.sysfs import discover
from nri_resmgr.sysfs.system import System

FIXTURES = Path(__file__).parent / "fixtures"
KIB = 1024


def system_of(name: str) -> System:
    return discover(str(FIXTURES / name))


def test_a_two_cpu_kvm_guest_copied_from_this_machine() -> None:
    # AMD EPYC under KVM (2026-12-03): lscpu says 1 socket, 2 cores, 1 thread per core;
    # node0/meminfo says MemTotal 9660136 kB; distance "10"; nothing isolated.
    s = system_of("epyc-kvm-2cpu")
    assert s.online == CpuSet([0, 1])
    assert s.packages() == [0]
    assert s.dies(0) == [0]
    assert (s.core_of(0), s.core_of(1)) == (CpuSet([0]), CpuSet([1]))
    assert sorted(s.nodes) == [0]
    assert s.nodes[0].cpus == CpuSet([0, 1])
    assert s.nodes[0].memory == 9660136 * KIB
    assert s.nodes[0].distances == {0: 10}
    assert s.isolated == CpuSet()


def test_two_sockets_with_interleaved_thread_numbering() -> None:
    # Threads of a core are n and n+4; socket 0 holds 0,1,4,5 and socket 1 holds 2,3,6,7.
    s = system_of("two-sockets-interleaved-smt")
    assert s.online == CpuSet(range(8))
    assert s.packages() == [0, 1]
    assert s.package_cpus(0) == CpuSet([0, 1, 4, 5])
    assert s.package_cpus(1) == CpuSet([2, 3, 6, 7])
    assert s.core_of(1) == CpuSet([1, 5])
    assert s.core_of(6) == CpuSet([2, 6])
    assert s.nodes[0].cpus == CpuSet([0, 1, 4, 5])
    assert s.nodes[1].cpus == CpuSet([2, 3, 6, 7])
    assert [s.cpus[c].node for c in range(8)] == [0, 0, 1, 1, 0, 0, 1, 1]
    assert s.nodes[0].memory == 16777216 * KIB
    assert s.nodes[1].memory == 8388608 * KIB
    assert s.nodes[0].distances == {0: 10, 1: 21}
    assert s.nodes[1].distances == {0: 21, 1: 10}
    assert s.nodes_of(CpuSet([4, 6])) == [0, 1]
    assert s.closest_memory(CpuSet([5])) == CpuSet([0])


def test_smt_switched_off_leaves_one_thread_a_core() -> None:
    # cpu/online "0-3", cpu4-7 offline without topology; each core lists only itself.
    s = system_of("smt-off")
    assert s.online == CpuSet(range(4))
    assert sorted(s.cpus) == [0, 1, 2, 3]
    assert all(s.core_of(c) == CpuSet([c]) for c in range(4))
    assert s.nodes[0].cpus == CpuSet(range(4))
    assert s.nodes[0].memory == 4194304 * KIB


def test_a_cpu_less_memory_node_is_a_node_without_cpus() -> None:
    # node1: cpulist empty, MemTotal 33554432 kB, 30 away from node0.
    s = system_of("cpuless-memory-node")
    assert sorted(s.nodes) == [0, 1]
    assert s.nodes[1].cpus == CpuSet()
    assert s.nodes[1].memory == 33554432 * KIB
    assert s.nodes[0].distances == {0: 10, 1: 30}
    assert {s.cpus[c].node for c in range(4)} == {0}
    assert s.core_of(2) == CpuSet([2, 3])
    # CPUs on node0, which has memory of its own: their memory stays local.
    assert s.closest_memory(CpuSet(range(4))) == CpuSet([0])
    assert s.nodes_of(CpuSet(range(4))) == [0]


def test_an_offline_cpu_is_not_discovered_even_where_a_list_names_it() -> None:
    # cpu/online "0-1,3"; node0/cpulist still says "0-3"; cpu3's only online thread is 3;
    # cpu/isolated "3".
    s = system_of("offline-cpu")
    assert s.online == CpuSet([0, 1, 3])
    assert 2 not in s.cpus
    assert s.nodes[0].cpus == CpuSet([0, 1, 3])
    assert s.core_of(0) == CpuSet([0, 1])
    assert s.core_of(3) == CpuSet([3])
    assert s.isolated == CpuSet([3])
