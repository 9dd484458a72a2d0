"""nri-plugins' topology-aware e2e scenarios on the n4c16 VM (2 packages x 2 NUMA nodes x
2 cores x 2 threads, 2G per node), replayed: same configuration, pods, order and
``verify`` expressions (test/e2e/policies.test-suite/topology-aware/n4c16/<test>/code.var.sh).

Each upstream test is split where it starts afresh (``kubectl delete pods --all`` or a
relaunch of the policy with a new configuration); a phase starts with the pod number the
upstream run reaches there. Markers name the issue 14 item a failing phase waits for.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_resmgr.errors import ConfigError
from tests.policies.topology_aware_e2e.scenario import Scenario, helm_config
from tests.policies.topology_aware_e2e.topologies import N4C16

HT = "hide-hyperthreads.resource-policy.nri.io"
UB = "unlimited-burstable.resource-policy.nri.io"


def xfail(item: int, why: str) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=True, reason=f"issue 14 item {item}: {why}")


def run(tmp_path: Path, first_pod: int = 0, **cfg: object) -> Scenario:
    return Scenario(tmp_path, N4C16, helm_config(**cfg), first_pod=first_pod)  # type: ignore[arg-type]


# -- test00-basic-placement -----------------------------------------------------------------


def test00_pod0_isolated_eligible_spread(tmp_path: Path) -> None:
    s = run(tmp_path)
    s.create("guaranteed", CONTCOUNT=4, CPU="1")
    s.verify(
        'len(cpus["pod0c0"]) == 1',
        'len(cpus["pod0c1"]) == 1',
        'len(cpus["pod0c2"]) == 1',
        'len(cpus["pod0c3"]) == 1',
        'disjoint_sets(cpus["pod0c0"], cpus["pod0c1"], cpus["pod0c2"], cpus["pod0c3"])',
        'disjoint_sets(nodes["pod0c0"], nodes["pod0c1"], nodes["pod0c2"], nodes["pod0c3"])',
    )


def test00_pod1_hide_hyperthreads(tmp_path: Path) -> None:
    s = run(tmp_path, first_pod=1)
    s.create("guaranteed", CONTCOUNT=4, CPU="3", ann=[f'{HT}/container.pod1c2: "true"'])
    s.verify(
        'len(cpus["pod1c0"]) == 3',
        'len(cpus["pod1c1"]) == 3',
        'len(cpus["pod1c2"]) == 2',
        'len(cores["pod1c2"]) == 2',
        'len(cpus["pod1c3"]) == 3',
        'disjoint_sets(cpus["pod1c0"], cpus["pod1c1"], cpus["pod1c2"], cpus["pod1c3"])',
        'disjoint_sets(nodes["pod1c0"], nodes["pod1c1"], nodes["pod1c2"], nodes["pod1c3"])',
    )


def test00_pod2_burstable_spread(tmp_path: Path) -> None:
    s = run(tmp_path, first_pod=2)
    s.create("burstable", CONTCOUNT=4, CPUREQ="2", CPULIM="2002m")
    s.verify(
        'disjoint_sets(cpus["pod2c0"], cpus["pod2c1"], cpus["pod2c2"], cpus["pod2c3"])',
        'disjoint_sets(nodes["pod2c0"], nodes["pod2c1"], nodes["pod2c2"], nodes["pod2c3"])',
    )


def test00_pod3_init_containers_freed(tmp_path: Path) -> None:
    s = run(tmp_path, first_pod=3)
    s.create("guaranteed", ICONTCOUNT=5, CONTCOUNT=2, CPU="5", MEM="100M")
    s.verify(
        'disjoint_sets(cpus["pod3c0"], cpus["pod3c1"])',
        'disjoint_sets(nodes["pod3c0"], nodes["pod3c1"])',
        'disjoint_sets(packages["pod3c0"], packages["pod3c1"])',
    )


def test00_pod4_colocate_pods(tmp_path: Path) -> None:
    s = run(tmp_path, first_pod=4, COLOCATE_PODS=True)
    s.create("guaranteed", CONTCOUNT=4, CPU="100m")
    s.verify(
        'cpus["pod4c1"] == cpus["pod4c0"]',
        'cpus["pod4c2"] == cpus["pod4c0"]',
        'cpus["pod4c3"] == cpus["pod4c0"]',
    )


def test00_pod5_colocate_namespaces(tmp_path: Path) -> None:
    s = run(tmp_path, first_pod=5, COLOCATE_NAMESPACES=True)
    s.create("guaranteed", CONTCOUNT=1, CPU="100m", namespace="test-ns")
    s.create("guaranteed", CONTCOUNT=1, CPU="100m", namespace="test-ns")
    s.create("guaranteed", CONTCOUNT=2, CPU="100m", namespace="test-ns")
    s.verify(
        'cpus["pod6c0"] == cpus["pod5c0"]',
        'cpus["pod7c0"] == cpus["pod5c0"]',
        'cpus["pod7c1"] == cpus["pod5c0"]',
    )


# -- test01-always-fits ---------------------------------------------------------------------


def test01_guaranteed_fit(tmp_path: Path) -> None:
    s = run(tmp_path, COLOCATE_PODS=True)
    s.create("guaranteed", CPU="1")
    s.verify('node_ids(nodes["pod0c0"]) == {1}', 'cpu_ids(cpus["pod0c0"]) == {4}')
    s.create("guaranteed", CPU="2")
    s.verify(
        'cpu_ids(cpus["pod0c0"]) == {4}',
        'node_ids(nodes["pod1c0"]) == {2}',
        'cpu_ids(cpus["pod1c0"]) == {8, 9}',
    )
    s.create("guaranteed", CPU="3")
    s.verify(
        'len(cpus["pod0c0"]) == 1',
        'len(cpus["pod1c0"]) == 2',
        'len(cores["pod1c0"]) == 1',
        'len(cpus["pod2c0"]) == 3',
        'len(cores["pod2c0"]) == 2',
        'len(nodes["pod2c0"]) == 1',
        'disjoint_sets(cpus["pod0c0"], cpus["pod1c0"], cpus["pod2c0"])',
    )
    s.create("guaranteed", CPU="4")
    s.verify(
        'len(cpus["pod0c0"]) == 1',
        'len(cpus["pod1c0"]) == 2',
        'len(cores["pod1c0"]) == 1',
        'len(cpus["pod2c0"]) == 3',
        'len(cores["pod2c0"]) == 2',
        'len(nodes["pod2c0"]) == 1',
        'len(cpus["pod3c0"]) == 4',
        'len(cores["pod3c0"]) == 2',
        'len(nodes["pod3c0"]) == 2',
        'disjoint_sets(cpus["pod0c0"], cpus["pod1c0"], cpus["pod2c0"], cpus["pod3c0"])',
    )
    s.delete_all()
    s.create("guaranteed", CPU="5")
    s.verify(
        'len(cpus["pod4c0"]) == 5',
        'len(cores["pod4c0"]) == 3',
        'len(nodes["pod4c0"]) == 2',
        'len(dies["pod4c0"]) == 1',
    )
    s.create("guaranteed", CPU="7")
    s.verify(
        'len(cpus["pod4c0"]) == 5',
        'len(cores["pod4c0"]) == 3',
        'len(nodes["pod4c0"]) == 2',
        'len(dies["pod4c0"]) == 1',
        'len(cpus["pod5c0"]) == 7',
        'len(cores["pod5c0"]) == 4',
        'len(dies["pod5c0"]) == 1',
        'disjoint_sets(cpus["pod4c0"], cpus["pod5c0"])',
    )
    s.delete_all()
    s.create("guaranteed", CPU="9")
    s.verify('len(cpus["pod6c0"]) == 9', 'len(packages["pod6c0"]) == 2')


def test01_burstable_fit(tmp_path: Path) -> None:
    # After ``reset counters``: pod numbering starts again at pod0.
    s = run(tmp_path, COLOCATE_PODS=True)
    s.create("burstable", CPUREQ="3", CPULIM="4")
    s.verify('len(cpus["pod0c0"]) >= 2')
    s.create("burstable", CPUREQ="4", CPULIM="5")
    s.verify('len(cpus["pod0c0"]) >= 2', 'len(cpus["pod1c0"]) >= 4')
    s.create("burstable", CPUREQ="5", CPULIM="6")
    s.verify('len(cpus["pod0c0"]) >= 2', 'len(cpus["pod1c0"]) >= 4', 'len(cpus["pod2c0"]) >= 5')
    s.delete("pod0", "pod1")
    s.create("burstable", CPUREQ="8", CPULIM="9")
    s.verify('len(cpus["pod2c0"]) >= 5', 'len(cpus["pod3c0"]) >= 8')
    s.delete("pod3")
    s.create("burstable", CPUREQ="5", CPULIM="6")
    s.create("burstable", CPUREQ="4", CPULIM="5")
    s.verify('len(cpus["pod2c0"]) >= 5', 'len(cpus["pod4c0"]) >= 5', 'len(cpus["pod5c0"]) >= 4')


# -- test02-shrink-and-grow-shared ----------------------------------------------------------


def test02_shrink_and_grow_shared(tmp_path: Path) -> None:
    s = run(tmp_path, COLOCATE_PODS=True)
    s.create("guaranteed", CPU="5", CONTCOUNT=2)
    s.verify(
        'len(cpus["pod0c0"]) == 5',
        'len(cpus["pod0c1"]) == 5',
        'len(nodes["pod0c0"]) == len(nodes["pod0c1"]) == 2',
        'len(dies["pod0c0"]) == len(dies["pod0c1"]) == 1',
        'disjoint_sets(cpus["pod0c0"], cpus["pod0c1"])',
    )
    s.create("besteffort", CONTCOUNT=2)
    s.verify(
        'len(cpus["pod0c0"]) == 5',
        'len(cpus["pod0c1"]) == 5',
        'disjoint_sets(set.union(cpus["pod0c0"], cpus["pod0c1"]))',
        'len(cpus["pod1c0"]) > 0',
        'len(cpus["pod1c1"]) > 0',
        'disjoint_sets(set.union(cpus["pod0c0"], cpus["pod0c1"]),'
        ' set.union(cpus["pod1c0"], cpus["pod1c1"]))',
    )
    s.delete("pod0")
    s.create("guaranteed", CPU="3", CONTCOUNT=4)
    s.verify(
        'len(cpus["pod2c0"]) == len(cpus["pod2c1"]) == len(cpus["pod2c2"])'
        ' == len(cpus["pod2c3"]) == 3',
        'disjoint_sets(cpus["pod2c0"], cpus["pod2c1"], cpus["pod2c2"], cpus["pod2c3"])',
    )
    s.create("guaranteed", CPU="1")
    s.verify(
        'disjoint_sets(set.union(cpus["pod1c0"], cpus["pod1c1"]),'
        ' set.union(cpus["pod3c0"], cpus["pod2c0"], cpus["pod2c1"], cpus["pod2c2"],'
        ' cpus["pod2c3"]))'
    )


# -- test03-simple-affinity -----------------------------------------------------------------


def affinity(kind: str, pairs: str) -> dict[str, str]:
    """The test's ``inject-affinities``: ``"a:b,c d:e"`` as a block-scalar annotation."""
    lines = []
    for pair in pairs.split():
        src, dst = pair.split(":")
        lines.append(f"{src}: [ {', '.join(dst.split(','))} ]")
    return {f"resource-policy.nri.io/{kind}": "\n".join(lines) + "\n"}


def test03_pod0_no_affinities(tmp_path: Path) -> None:
    s = run(tmp_path)
    s.create("guaranteed", CONTCOUNT=4, CPU="1")
    s.verify(
        'nodes["pod0c0"] == {"node1"}',
        'nodes["pod0c1"] == {"node2"}',
        'nodes["pod0c2"] == {"node3"}',
        'nodes["pod0c3"] == {"node0"}',
    )


def test03_pod1_affinities(tmp_path: Path) -> None:
    s = run(tmp_path, first_pod=1)
    s.create("guaranteed", CONTCOUNT=4, CPU="1",
             annotations=affinity("affinity", "pod1c0:pod1c1 pod1c2:pod1c3"))  # fmt: skip
    s.verify(
        'nodes["pod1c0"] == nodes["pod1c1"] == {"node1"}',
        'nodes["pod1c2"] == nodes["pod1c3"] == {"node2"}',
    )


def test03_pod2_anti_affinities(tmp_path: Path) -> None:
    s = run(tmp_path, first_pod=2)
    pairs = "pod2c4:pod2c0,pod2c1,pod2c2 pod2c5:pod2c0,pod2c2,pod2c3"
    s.create("guaranteed", CONTCOUNT=6, CPU="1", annotations=affinity("anti-affinity", pairs))
    s.verify(
        'disjoint_sets(nodes["pod2c4"], nodes["pod2c0"], nodes["pod2c1"], nodes["pod2c2"])',
        'disjoint_sets(nodes["pod2c5"], nodes["pod2c0"], nodes["pod2c2"], nodes["pod2c3"])',
    )


# -- test04-available-resources -------------------------------------------------------------


def test04_available_cpuset(tmp_path: Path) -> None:
    s = run(tmp_path, RESERVED_CPU="cpuset:11", AVAILABLE_CPU="cpuset:4-7,8-11")
    s.create("guaranteed", CPU="3")
    s.verify("cpus['pod0c0'] == {'cpu04', 'cpu05', 'cpu06'}", "mems['pod0c0'] == {'node1'}")
    s.create("guaranteed", CONTCOUNT=2, CPU="980m")
    s.verify(
        "cpus['pod1c0'] == {'cpu08', 'cpu09', 'cpu10'}",
        "cpus['pod1c1'] == {'cpu08', 'cpu09', 'cpu10'}",
        "mems['pod1c0'] == {'node2'}",
        "mems['pod1c1'] == {'node2'}",
    )


def test04_available_exclude_cpuset(tmp_path: Path) -> None:
    s = run(tmp_path, first_pod=2, RESERVED_CPU="cpuset:11-15",
            AVAILABLE_CPU="exclude-cpuset:0-1", UNLIMITED_BURSTABLE="system")  # fmt: skip
    s.create("burstable", CPUREQ="250m", CPULIM="0")
    s.verify(
        "cpus['pod2c0'] == {'cpu02', 'cpu03', 'cpu04', 'cpu05', 'cpu06', 'cpu07', 'cpu08',"
        " 'cpu09', 'cpu10'}",
        "mems['pod2c0'] == {'node0', 'node1', 'node2', 'node3'}",
    )


# -- test05-reserved-resources --------------------------------------------------------------

AVAIL05 = "cpuset:4-7,8-13"


@pytest.mark.parametrize("reserved", ["cpuset:3,7,11,15", '"11"'])
def test05_launch_fails(tmp_path: Path, reserved: str) -> None:
    # Reserved CPUs not within the available ones; more reserved than available CPUs.
    # (RESERVED_CPU='"11"' is the YAML string "11": eleven CPUs.)
    with pytest.raises(ConfigError, match=r"spec.reservedResources.cpu: .*available"):
        run(tmp_path, RESERVED_CPU=reserved.strip('"'), AVAILABLE_CPU=AVAIL05)


def test05_besteffort_on_both_reserved(tmp_path: Path) -> None:
    s = run(tmp_path, RESERVED_CPU="cpuset:10-11", AVAILABLE_CPU=AVAIL05)
    s.create("besteffort", namespace="kube-system", CONTCOUNT=3)
    s.verify("cpus['pod0c0'] == cpus['pod0c1'] == cpus['pod0c2'] == {'cpu10', 'cpu11'}")


def test05_reserved_across_nodes(tmp_path: Path) -> None:
    s = run(tmp_path, first_pod=1, RESERVED_CPU="cpuset:7,11", AVAILABLE_CPU=AVAIL05)
    s.create("besteffort", namespace="kube-system", CONTCOUNT=4)
    s.verify(
        "cpus['pod1c0'] == cpus['pod1c1'] == cpus['pod1c2'] == cpus['pod1c3']",
        "cpus['pod1c0'] == {'cpu07', 'cpu11'}",
    )
    s.create("guaranteed", namespace="kube-system", CPU="200m", CONTCOUNT=4)
    s.verify(
        "cpus['pod2c0'] == cpus['pod2c1'] == cpus['pod2c2'] == cpus['pod2c3']",
        "cpus['pod2c0'] == {'cpu07', 'cpu11'}",
    )
    for pod in ("pod3", "pod4"):
        s.create("guaranteed", namespace="kube-system", CPU="100m", CONTCOUNT=1)
        s.verify(f"cpus['{pod}c0'] == {{'cpu07', 'cpu11'}}")
        s.delete(pod)


def test05_reserved_overflow_falls_back_to_shared(tmp_path: Path) -> None:
    s = run(tmp_path, first_pod=1, RESERVED_CPU="cpuset:7,11", AVAILABLE_CPU=AVAIL05)
    s.create("besteffort", namespace="kube-system", CONTCOUNT=4)
    s.create("guaranteed", namespace="kube-system", CPU="200m", CONTCOUNT=4)
    s.next_pod = 5  # pod3 and pod4 came and went
    s.create("guaranteed", namespace="kube-system", CPU="2", CONTCOUNT=1)
    s.verify(
        "cpus['pod5c0'] == {'cpu04', 'cpu05', 'cpu06', 'cpu08', 'cpu09', 'cpu10', 'cpu12', 'cpu13'}"
    )


def test05_reserved_milli_cpus(tmp_path: Path) -> None:
    # ``reset counters``; 2250m reserves three CPUs, the first available ones.
    s = run(tmp_path, RESERVED_CPU="2250m", AVAILABLE_CPU=AVAIL05)
    s.create("besteffort", namespace="kube-system", CPU="2", CONTCOUNT=1)
    s.verify("cpus['pod0c0'] == {'cpu04', 'cpu05', 'cpu06'}")


# -- test07-mixed-allocations ---------------------------------------------------------------

PS, PI = (
    "prefer-shared-cpus.resource-policy.nri.io/pod",
    "prefer-isolated-cpus.resource-policy.nri.io/pod",
)
ONE_NODE = "[len(mems[c]) for c in mems] == [1] * len(mems)"


def excl(c: str) -> str:
    """How many of ``c``'s CPUs no other container may use."""
    return f"len(cpus['{c}'] - set.union(*[cpus[c] for c in cpus if c != '{c}']))"


def test07_mixed_allocations(tmp_path: Path) -> None:
    s = run(tmp_path)
    s.create("guaranteed", CONTCOUNT=2, CPU="500m")
    s.verify(
        "len(mems['pod0c0']) == 1",
        "len(mems['pod0c1']) == 1",
        "disjoint_sets(mems['pod0c0'], mems['pod0c1'])",
        "len(cpus['pod0c0']) == 4",
        "len(cpus['pod0c1']) == 4",
        "disjoint_sets(cpus['pod0c0'], cpus['pod0c1'])",
    )
    s.create("guaranteed", CONTCOUNT=2, CPU="1500m")
    s.verify(
        ONE_NODE,
        "disjoint_sets(mems['pod1c0'], mems['pod1c1'])",
        "len(cpus['pod0c0']) == 3 or len(cpus['pod0c1']) == 3",
        "len(cpus['pod0c0']) == 4 or len(cpus['pod0c1']) == 4",
        "len(cpus['pod1c0']) == 4",
        "len(cpus['pod1c1']) == 4",
        "len(cpus['pod1c1'] - cpus['pod0c0'] - cpus['pod0c1']) == 1",
    )
    s.create("guaranteed", CONTCOUNT=2, CPU="2400m")
    s.verify(
        ONE_NODE,
        f"{excl('pod1c1')} == 1",
        "len(cpus['pod2c0']) == 3",
        f"{excl('pod2c0')} == 3",
        "len(cpus['pod2c1']) == 4",
        f"{excl('pod2c1')} == 0",
        "mems['pod2c1'] == mems['pod0c0'] or mems['pod2c1'] == mems['pod0c1']",
    )
    s.create("guaranteed", CONTCOUNT=1, CPU="2400m", ann=[f'{PS}: "false"', f'{PI}: "true"'])
    s.verify(ONE_NODE, "mems['pod3c0'] == mems['pod1c0']", f"{excl('pod1c0')} == 1",
             f"{excl('pod3c0')} == 2")  # fmt: skip
    s.delete("pod3")
    s.create("guaranteed", CONTCOUNT=1, CPU="2400m", ann=[f'{PS}: "false"', f'{PI}: "false"'])
    s.verify(ONE_NODE, "mems['pod4c0'] == mems['pod1c0']", f"{excl('pod1c0')} == 1",
             f"{excl('pod4c0')} == 2")  # fmt: skip
    s.delete("pod1")
    s.verify("len(cpus['pod0c0']) == 4", "len(cpus['pod0c1']) == 4")
    s.create("guaranteed", CONTCOUNT=2, CPU="1500m", ann=[f'{PS}: "true"'])
    s.verify(
        ONE_NODE,
        "mems['pod5c0'] == mems['pod0c0'] or mems['pod5c0'] == mems['pod0c1']",
        "len(cpus['pod5c0']) == 4",
        "len(cpus['pod0c0']) == 4",
        "len(cpus['pod0c1']) == 4",
        "mems['pod5c1'] == mems['pod4c0']",
        "len(cpus['pod5c1']) == 2",
        f"{excl('pod5c0')} == 0",
        f"{excl('pod5c1')} == 0",
    )


# -- test08-cpuprio-allocation --------------------------------------------------------------

CP = "prefer-cpu-priority.resource-policy.nri.io"


def _hybrid(tmp_path: Path, kind: str, cpus: str) -> None:
    """Upstream overrides its CPU type detection for one kind (OVERRIDE_SYS_ATOM_CPUS or
    OVERRIDE_SYS_CORE_CPUS) and takes the other CPUs as the other kind; the kernel lists
    the kinds in ``/sys/devices/cpu_{atom,core}/cpus``, here only the one overridden."""
    d = tmp_path / "sys/devices" / kind
    d.mkdir(parents=True, exist_ok=True)
    (d / "cpus").write_text(f"{cpus}\n")


def test08_low_priority_cpus(tmp_path: Path) -> None:
    from tests.policies.replay.vm import write_vm_sysfs

    write_vm_sysfs(tmp_path, N4C16)
    _hybrid(tmp_path, "cpu_atom", "4-5")
    s = Scenario(tmp_path, N4C16, helm_config(), write=False)
    s.create("guaranteed", CONTCOUNT=3, CPU="1",
             ann=[f"{CP}/container.pod0c0: low", f"{CP}/container.pod0c2: low"])  # fmt: skip
    s.verify(
        'cpus["pod0c0"] == {"cpu04"}',
        'cpus["pod0c1"] not in [ {"cpu04"}, {"cpu05"} ]',
        'cpus["pod0c2"] == {"cpu05"}',
    )


def test08_high_priority_cpus(tmp_path: Path) -> None:
    from tests.policies.replay.vm import write_vm_sysfs

    write_vm_sysfs(tmp_path, N4C16)
    _hybrid(tmp_path, "cpu_core", "0-1,4-5")
    s = Scenario(tmp_path, N4C16, helm_config(), write=False, first_pod=1)
    # Upstream sets ANN0 twice; the second (container high) is the one in the pod.
    s.create("guaranteed", CONTCOUNT=3, CPU="1",
             ann=[f"{CP}/container.pod1c0: high", f"{CP}/container.pod1c2: high"])  # fmt: skip
    s.verify(
        'cpus["pod1c0"] in     [ {"cpu01"}, {"cpu04"}, {"cpu05"} ]',
        'cpus["pod1c1"] not in [ {"cpu01"}, {"cpu04"}, {"cpu05"} ]',
        'cpus["pod1c2"] in     [ {"cpu01"}, {"cpu04"}, {"cpu05"} ]',
    )


# -- test09-container-exit ------------------------------------------------------------------


def test09_container_exit(tmp_path: Path) -> None:
    s = run(tmp_path)
    s.create("guaranteed", CONTCOUNT=1, CPU="1000m", MEM="64M")
    s.verify('len(cpus["pod0c0"]) == 1', '"pod0c0" in allocations')
    # The crash-and-restart step needs a real runtime (tests/runtime covers restarts).
    s.exit("pod0c0")
    s.verify('"pod0c0" not in cpus', '"pod0c0" not in allocations')


# -- test10-additional-reserved-namespaces --------------------------------------------------

PR = "prefer-reserved-cpus.resource-policy.nri.io/pod"
PRC = "prefer-reserved-cpus.resource-policy.nri.io/container"


def test10_reserved_pool_namespaces(tmp_path: Path) -> None:
    s = run(tmp_path, RESERVED_POOL_NAMESPACES="reserved-pool reserved-* foobar",
            AVAILABLE_CPU="cpuset:8-11", RESERVED_CPU="cpuset:10-11")  # fmt: skip
    s.create("besteffort", CONTCOUNT=1, namespace="kube-system")
    s.create("besteffort", CONTCOUNT=1)
    s.verify('cpus["pod0c0"] == {"cpu10", "cpu11"}', 'cpus["pod1c0"] == {"cpu08", "cpu09"}')
    s.delete("pod1")
    s.create("besteffort", CONTCOUNT=1, namespace="foobar")
    s.create("besteffort", CONTCOUNT=1, namespace="foobar", ann=[f'{PR}: "false"'])
    s.create("besteffort", CONTCOUNT=1, namespace="foobar", ann=[f'{PR}: "true"'])
    s.verify(
        'cpus["pod2c0"] == {"cpu10", "cpu11"}',
        'cpus["pod3c0"] == {"cpu08", "cpu09"}',
        'cpus["pod4c0"] == {"cpu10", "cpu11"}',
    )


# -- test11-reserved-cpu-annotations --------------------------------------------------------


def test11_prefer_reserved(tmp_path: Path) -> None:
    s = run(tmp_path, AVAILABLE_CPU="cpuset:8-11", RESERVED_CPU="cpuset:10-11")
    s.create("guaranteed", CONTCOUNT=1, ann=[f'{PR}: "true"'])
    s.verify('cpus["pod0c0"] == {"cpu10", "cpu11"}')
    s.create("guaranteed", CONTCOUNT=1,
             ann=[f'{PRC}.special: "false"'])  # fmt: skip
    s.verify('cpus["pod1c0"] == {"cpu08"}')


def test11_reserved_hide_hyperthreads(tmp_path: Path) -> None:
    s = run(tmp_path, AVAILABLE_CPU="cpuset:8-11", RESERVED_CPU="cpuset:10-11")
    s.create("guaranteed", CONTCOUNT=1, ann=[f'{PR}: "true"'])
    s.create("guaranteed", CONTCOUNT=1,
             ann=[f'{PRC}.special: "false"'])  # fmt: skip
    s.delete("pod0")
    s.create("guaranteed", CONTCOUNT=1, ann=[f'{PR}: "true"', f'{HT}/pod: "true"'])
    s.verify('cpus["pod2c0"] == {"cpu10"}')


def test11_preserve(tmp_path: Path) -> None:
    s = run(tmp_path, first_pod=3, AVAILABLE_CPU="cpuset:8-11", RESERVED_CPU="cpuset:10-11")
    s.create("guaranteed", CONTCOUNT=1, ann=[f'{PR}: "true"'], name="pod0")
    s.create("guaranteed", CONTCOUNT=1, name="pod1",
             ann=[f'{PRC}.special: "false"'])  # fmt: skip
    s.delete("pod0")
    cp, mp = "cpu.preserve.resource-policy.nri.io", "memory.preserve.resource-policy.nri.io"
    s.create("guaranteed", CONTCOUNT=4, CPU="100m", MEM="100M", ann=[
        f'{cp}: "true"',
        f'{mp}/container.pod3c1: "true"',
        f'{mp}/container.pod3c2: "true"',
        f'{cp}/container.pod3c2: "false"',
        f'{cp}/container.pod3c3: "false"',
        f'{mp}/container.pod3c3: "false"',
    ])  # fmt: skip
    s.verify(
        'len(cpus["pod3c0"]) == 16',
        'len(mems["pod3c0"]) == 4',
        'len(cpus["pod3c1"]) == 16',
        'len(mems["pod3c1"]) == 4',
        'len(cpus["pod3c2"]) == 1',
        'len(mems["pod3c2"]) == 4',
        'len(cpus["pod3c3"]) == 1',
        'len(mems["pod3c3"]) == 1',
    )


# -- test14-burstable -----------------------------------------------------------------------


def test14_burstable_memory_limits(tmp_path: Path) -> None:
    s = run(tmp_path, COLOCATE_PODS=True)
    s.create("burstable", CPUREQ="1", CPULIM="2", MEMREQ="100M", MEMLIM="2.5G")
    s.create("burstable", CPUREQ="1", CPULIM="2", MEMREQ="200M", MEMLIM="5G")
    s.create("burstable", CPUREQ="1", CPULIM="2", MEMREQ="100M", MEMLIM="2.5G")
    s.create("burstable", CPUREQ="1", CPULIM="2", MEMREQ="200M", MEMLIM="0")
    s.verify(
        'len(nodes["pod0c0"]) == 2',
        'len(nodes["pod1c0"]) == 4',
        'len(nodes["pod2c0"]) == 2',
        'len(nodes["pod3c0"]) == 4',
    )


def test14_burstable_cpu_limits(tmp_path: Path) -> None:
    s = run(tmp_path, first_pod=4, COLOCATE_PODS=False)
    s.create("burstable", CONTCOUNT=2, CPUREQ="2", CPULIM="5", MEMREQ="100M")
    s.verify('nodes["pod4c0"] == { "node2" ,"node3" }', 'nodes["pod4c1"] == { "node0", "node1" }')
    s.create("burstable", CONTCOUNT=2, CPUREQ="2", CPULIM="0", MEMREQ="100M")
    s.verify(
        'nodes["pod5c0"] == { "node0", "node1" } or nodes["pod5c0"] == { "node2", "node3" }',
        'nodes["pod5c1"] == { "node0", "node1" } or nodes["pod5c1"] == { "node2", "node3" }',
    )


def test14_unlimited_burstable_annotation(tmp_path: Path) -> None:
    s = run(tmp_path, first_pod=6)
    s.create("burstable", CONTCOUNT=2, CPUREQ="2", CPULIM="0", MEMREQ="100M",
             ann=[f"{UB}/container.pod6c0: numa", f"{UB}/container.pod6c1: system"])  # fmt: skip
    s.verify('len(nodes["pod6c0"]) == 1', 'len(nodes["pod6c1"]) == 4')
    s.delete_all()
    s.create("burstable", CONTCOUNT=2, CPUREQ="2", CPULIM="0", MEMREQ="100M",
             ann=[f"{UB}/container.pod7c0: numa", f"{UB}/container.pod7c1: die"])  # fmt: skip
    s.verify('len(nodes["pod7c0"]) == 1', 'len(nodes["pod7c1"]) == 2')


def test14_unlimited_burstable_config(tmp_path: Path) -> None:
    s = run(tmp_path, first_pod=8, UNLIMITED_BURSTABLE="numa")
    s.create("burstable", CONTCOUNT=2, CPUREQ="2", CPULIM="0", MEMREQ="100M",
             ann=[f"{UB}/container.pod8c1: die"])  # fmt: skip
    s.verify('len(nodes["pod8c0"]) == 1', 'len(nodes["pod8c1"]) == 2')


# -- test14-global-shared-preference --------------------------------------------------------


def test14_global_shared_preference(tmp_path: Path) -> None:
    s = run(tmp_path, PREFER_SHARED_CPUS=True)
    s.create("guaranteed", CONTCOUNT=1, CPU="1")
    s.verify("len(cpus['pod0c0']) > 1")
    s.create("guaranteed", CONTCOUNT=1, CPU="2")
    s.verify("len(cpus['pod1c0']) > 1")
    s.delete_all()
    s.create("guaranteed", CONTCOUNT=1, CPU="1", ann=[f'{PS}: "false"'])
    s.verify("len(cpus['pod2c0']) == 1")
    s.create("guaranteed", CONTCOUNT=1, CPU="2", ann=[f'{PS}: "false"'])
    s.verify("len(cpus['pod3c0']) == 2")


# -- test15-busy-shared-pools ---------------------------------------------------------------

BUSY = (
    'disjoint_sets(cpus["pod{0}c0"],cpus["pod{0}c1"],cpus["pod{0}c2"],cpus["pod{0}c3"],'
    'cpus["pod{1}c0"])'
)


@pytest.mark.parametrize(
    "template, first, cpureq",
    [("besteffort", 0, ""), ("burstable", 2, "1m"), ("burstable", 4, "250m")],
    ids=["besteffort", "burstable-1m", "burstable-250m"],
)
def test15_busy_shared_pools(tmp_path: Path, template: str, first: int, cpureq: str) -> None:
    s = run(tmp_path, first_pod=first)
    s.create(template, CONTCOUNT=4, CPUREQ=cpureq, CPULIM="750m")
    s.create("guaranteed", CPU="4", MEM="100M", CONTCOUNT=1)
    s.verify(BUSY.format(first, first + 1))


# -- test16-idle-shared-pools ---------------------------------------------------------------


def test16_idle_shared_pools_sliced_empty(tmp_path: Path) -> None:
    s = run(tmp_path)
    s.create("guaranteed", CPU="4", MEM="100M", CONTCOUNT=3)
    s.verify('disjoint_sets(cpus["pod0c0"],cpus["pod0c1"],cpus["pod0c2"])')
    s.verify('len(cpus["pod0c0"]) == 4', 'len(cpus["pod0c1"]) == 4', 'len(cpus["pod0c2"]) == 4')
    s.verify('disjoint_sets(nodes["pod0c0"],nodes["pod0c1"],nodes["pod0c2"])')
    s.verify('len(nodes["pod0c0"]) == 1', 'len(nodes["pod0c1"]) == 1', 'len(nodes["pod0c2"]) == 1')
    s.create("besteffort", CONTCOUNT=4)
    s.verify(
        'cpus["pod1c0"] == cpus["pod1c1"]',
        'cpus["pod1c0"] == cpus["pod1c2"]',
        'cpus["pod1c0"] == cpus["pod1c3"]',
    )
    s.create("burstable", CONTCOUNT=4, CPUREQ="100m", CPULIM="150m")
    s.verify(
        'cpus["pod2c0"] == cpus["pod2c1"]',
        'cpus["pod2c0"] == cpus["pod2c2"]',
        'cpus["pod2c0"] == cpus["pod2c3"]',
        'cpus["pod2c0"] == cpus["pod1c0"]',
    )
    s.verify('disjoint_sets(nodes["pod0c0"],nodes["pod0c1"],nodes["pod0c2"],nodes["pod1c0"])')


def test16_idle_shared_pools_besteffort_first(tmp_path: Path) -> None:
    s = run(tmp_path, first_pod=3)
    s.create("besteffort", CONTCOUNT=2)
    s.verify('disjoint_sets(cpus["pod3c0"],cpus["pod3c1"])')
    s.create("guaranteed", CPU="4", MEM="100M", CONTCOUNT=1)
    s.verify('disjoint_sets(cpus["pod4c0"],cpus["pod3c0"],cpus["pod3c1"])')
    s.verify('len(cpus["pod4c0"]) == 4', 'len(nodes["pod4c0"]) == 1')
    s.verify('disjoint_sets(nodes["pod3c0"],nodes["pod3c1"],nodes["pod4c0"])')


# -- test18-strict-alignment ----------------------------------------------------------------


def _hint(pod: str, numa: str) -> list[str]:
    return [
        f"strict.topologyhints.resource-policy.nri.io/container.{pod}c0: 'true'",
        f"test.topologyhints.resource-policy.nri.io/container.{pod}c0:"
        f" '{{ test: {{ NUMAs: \"{numa}\" }} }} }}'",
    ]


ISO = "isolated-cpus.resource-policy.nri.io"


def test18_strict_alignment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Upstream's chart always sets ENABLE_TEST_APIS (its template tests a non-empty string).
    monkeypatch.setenv("ENABLE_TEST_APIS", "1")
    strict_alignment(tmp_path)


def strict_alignment(tmp_path: Path) -> None:
    """test18's pods, with test topology hints enabled (the simulated replay runs it too)."""
    s = run(tmp_path)
    node2 = '{"cpu08", "cpu09", "cpu10", "cpu11"}'
    s.create("guaranteed", CONTCOUNT=1, CPU="1", MEM="100M", ann=_hint("pod0", "2"))
    s.verify(f'cpus["pod0c0"].issubset({node2})', 'node_ids(nodes["pod0c0"]) == {2}')
    s.create("guaranteed", CONTCOUNT=1, CPU="1", MEM="100M", ann=_hint("pod1", "3"))
    s.verify('cpus["pod1c0"].issubset({"cpu12", "cpu13", "cpu14", "cpu15"})',
             'node_ids(nodes["pod1c0"]) == {3}')  # fmt: skip
    s.create("guaranteed", CONTCOUNT=1, CPU="1", MEM="100M", ann=_hint("pod2", "2"))
    s.verify(f'cpus["pod2c0"].issubset({node2})', 'node_ids(nodes["pod2c0"]) == {2}')
    e = s.try_create("guaranteed", CONTCOUNT=1, CPU="3", MEM="100M", ann=_hint("pod3", "2"))
    assert e is not None and "fail strict hint" in str(e)
    require = f'require-{ISO}/container.pod4c0: "true"'
    e = s.try_create("guaranteed", CONTCOUNT=1, CPU="1", MEM="100M",
                     ann=[*_hint("pod4", "2"), require])  # fmt: skip
    assert e is not None and "isolated CPUs" in str(e)
    s.create("guaranteed", CONTCOUNT=1, CPU="1", MEM="100M",
             ann=[*_hint("pod5", "2"), f'prefer-{ISO}/container.pod5c0: "true"'])  # fmt: skip
    s.verify(f'cpus["pod5c0"].issubset({node2})', 'node_ids(nodes["pod5c0"]) == {2}')
    s.delete("pod5")
    # The same two with the isolation preferences at different scopes.
    e = s.try_create("guaranteed", CONTCOUNT=1, CPU="1", MEM="100M",
                     ann=[*_hint("pod6", "2"), f'prefer-{ISO}/pod: "false"',
                          f'require-{ISO}/container.pod6c0: "true"'])  # fmt: skip
    assert e is not None and "isolated CPUs" in str(e)
    s.create("guaranteed", CONTCOUNT=1, CPU="1", MEM="100M",
             ann=[*_hint("pod7", "2"), f'prefer-{ISO}/container.pod7c0: "true"',
                  f'require-{ISO}/pod: "true"'])  # fmt: skip
    s.verify(f'cpus["pod7c0"].issubset({node2})', 'node_ids(nodes["pod7c0"]) == {2}')


# -- test30-numa-disabled -------------------------------------------------------------------


def test30_numa_disabled(tmp_path: Path) -> None:
    import shutil

    from tests.policies.replay.vm import write_vm_sysfs

    # A kernel without NUMA support: no /sys/devices/system/node at all.
    write_vm_sysfs(tmp_path, N4C16)
    shutil.rmtree(tmp_path / "sys/devices/system/node")
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/meminfo").write_text("MemTotal:        8388608 kB\n")
    s = Scenario(tmp_path, N4C16, helm_config(), write=False)
    s.create("guaranteed", CONTCOUNT=2, CPU="5")
    s.verify(
        'len(cpus["pod0c0"]) == 5',
        'len(cpus["pod0c1"]) == 5',
        'disjoint_sets(cpus["pod0c0"], cpus["pod0c1"])',
        'disjoint_sets(packages["pod0c0"], packages["pod0c1"])',
    )
