"""The daemon's lifecycle on the real node, as an operator meets it: SIGTERM leaves every
container where it is; a restart keeps what was placed and places what was created while
it was down; a containerd restart makes it register and synchronize again with nothing
moved; an edit of its configuration file moves containers, and the kernel shows the move.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

from nri_resmgr.cpuset import CpuSet
from tests.node.conftest import CORE, boot
from tests.node.pods import Pods, shown
from tests.node.replay import policy_document
from tests.node.session import Nodes, NodeSession
from tests.policies.replay.helm import helm_merge
from tests.policies.topology_aware_e2e.scenario import CHART_DEFAULTS, KIND, helm_config
from tests.policies.topology_aware_e2e.topologies import N4C16

MOVE_TIMEOUT = 300.0  # a bound against a hang under TCG, not a measure


def config(**values: object) -> str:
    return policy_document(KIND, helm_merge(CHART_DEFAULTS, helm_config(**values)))  # type: ignore[arg-type]


def node_of(cpus: CpuSet) -> set[int]:
    return {c // 4 for c in cpus}  # n4c16: CPUs 4n..4n+3 are NUMA node n


def mixed_workload(pods: Pods) -> None:
    pods.create("guaranteed", "g2", CPU="2", MEM="100M")
    pods.create("guaranteed", "g1", CPU="1", MEM="100M")
    pods.create("burstable", "b", CPUREQ="500m", CPULIM="1", MEMREQ="100M", MEMLIM="200M")
    pods.create("besteffort", "be")


def fresh(nodes: Nodes, **values: object) -> tuple[NodeSession, Pods]:
    session = boot(nodes, N4C16, "n4c16")
    session.reset()
    session.node.start_daemon(config(**values))
    return session, session.pods()


def wait_until(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + MOVE_TIMEOUT
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {MOVE_TIMEOUT:.0f}s for {what}")
        time.sleep(2)


@CORE
def test_sigterm_leaves_containers_in_place_and_a_restart_places_those_made_meanwhile(
    nodes: Nodes,
) -> None:
    session, pods = fresh(nodes)
    mixed_workload(pods)
    before = pods.kernel()
    exclusive = {n: CpuSet.parse(before[n].cpus) for n in ("g2c0", "g1c0")}
    assert [len(exclusive["g2c0"]), len(exclusive["g1c0"])] == [2, 1], shown(before)

    assert session.node.stop_plugin(signal.SIGTERM) == 0
    assert shown(pods.kernel()) == shown(before), "SIGTERM moved containers"

    # Created with no plugin: containerd leaves it on every CPU.
    pods.create("guaranteed", "g3", CPU="3", MEM="100M")
    assert pods.kernel()["g3c0"].cpus == "0-15"

    session.node.start_daemon(config())
    after = pods.kernel()
    cpus = {n: CpuSet.parse(k.cpus) for n, k in after.items()}
    assert {n: cpus[n] for n in exclusive} == exclusive, "a restart moved exclusive CPUs"
    assert len(cpus["g3c0"]) == 3 and len(node_of(cpus["g3c0"])) == 1, shown(after)
    taken = exclusive["g2c0"] | exclusive["g1c0"]
    assert cpus["g3c0"].isdisjoint(taken)
    for shared in ("bc0", "bec0"):
        assert cpus[shared].isdisjoint(taken | cpus["g3c0"]), shown(after)


def test_a_containerd_restart_registers_again_and_moves_nothing(nodes: Nodes) -> None:
    session, pods = fresh(nodes)
    mixed_workload(pods)
    before = shown(pods.kernel())
    registered = session.node.registrations()
    session.node.stop_containerd()
    session.node.start_containerd()
    wait_until("the daemon to register again", lambda: session.node.registrations() > registered)
    assert shown(pods.kernel()) == before
    assert session.node.plugin is not None
    assert session.guest.wait(session.node.plugin.pid, 0) is None, "the daemon exited"


@CORE
def test_editing_the_configuration_file_moves_containers(nodes: Nodes) -> None:
    session, pods = fresh(nodes, AVAILABLE_CPU="cpuset:0-7")
    pods.create("guaranteed", "g2", CPU="2", MEM="100M")
    pods.create("burstable", "b", CPUREQ="500m", CPULIM="1", MEMREQ="100M", MEMLIM="200M")
    before = pods.cpus()
    assert all(c.issubset(CpuSet.parse("0-7")) for c in before.values()), before

    # The daemon re-reads its file on change (no restart): socket 1's CPUs only now.
    session.guest.write("/etc/nri-resmgr/config.yaml", config(AVAILABLE_CPU="cpuset:8-15"))
    upper = CpuSet.parse("8-15")
    wait_until("the containers to move to CPUs 8-15",
               lambda: all(c.issubset(upper) for c in pods.cpus().values()))  # fmt: skip
    after = pods.cpus()
    assert len(after["g2c0"]) == 2 and after["g2c0"].isdisjoint(after["bc0"]), after
