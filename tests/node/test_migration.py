"""Migration day on a live node: upstream's topology-aware plugin (nri-plugins, built from its
published module as the bench builds it) places a mixed workload; it is stopped and ours
starts with the same configuration file: nothing that was placed validly moves (each
exclusive grant keeps its CPUs), and new containers are placed around the old ones. Then back
again: upstream's plugin, on a node it has no state for, places everything afresh; its
placements are checked valid. What did move, and where, is printed (and recorded with
NRI_RESMGR_NODE_RECORD) both ways.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from nri_resmgr.cpuset import CpuSet
from tests.bench.gopeer import ensure_go_topology_aware
from tests.conformance.build import BuildError
from tests.node.conftest import boot
from tests.node.guest import KernelPlacement
from tests.node.node import Node
from tests.node.pods import Pods, shown
from tests.node.replay import policy_document
from tests.node.session import Nodes
from tests.peers import missing_peer
from tests.policies.replay.helm import helm_merge
from tests.policies.topology_aware_e2e.scenario import CHART_DEFAULTS, KIND, helm_config
from tests.policies.topology_aware_e2e.topologies import N4C16

GO_PLUGIN = "/usr/local/bin/nri-resource-policy-topology-aware"
GO_CONFIG = "/etc/nri-resource-policy/config.yaml"
CONFIG = policy_document(KIND, helm_merge(CHART_DEFAULTS, helm_config()))
EXCLUSIVE = ("g2c0", "g1c0")
"""The containers with exclusive CPUs: those a switch must not move."""


def start_go(node: Node, run: int) -> None:
    """Upstream's plugin, as its DaemonSet runs it, with a state directory of its own."""
    node.guest.write(GO_CONFIG, CONFIG)
    argv = (GO_PLUGIN, "--config-file", GO_CONFIG, "--nri-plugin-index", "90",
            "--state-dir", f"/var/lib/nri-resource-policy-{run}",
            "--pid-file", f"/run/nri-resource-policy-{run}.pid")  # fmt: skip
    node.start_plugin("nri-plugins topology-aware", argv, f"/var/log/nri-go-{run}.log")


def moved(
    before: dict[str, KernelPlacement], after: dict[str, KernelPlacement]
) -> dict[str, tuple[tuple[str, str], tuple[str, str]]]:
    b, a = shown(before), shown(after)
    return {n: (b[n], a[n]) for n in b if n in a and b[n] != a[n]}


def report(step: str, changes: Mapping[str, object]) -> None:
    line = json.dumps({"migration": step, "moved": changes})
    print(f"\n{line}", file=sys.stderr)
    if record := os.environ.get("NRI_RESMGR_NODE_RECORD"):
        with Path(record).open("a") as f:
            f.write(line + "\n")


def workload(pods: Pods, suffix: str = "") -> None:
    pods.create("guaranteed", f"g2{suffix}", CPU="2", MEM="100M")
    pods.create("guaranteed", f"g1{suffix}", CPU="1", MEM="100M")
    pods.create("guaranteed", f"gf{suffix}", CPU="500m", MEM="100M")
    pods.create("burstable", f"b{suffix}", CPUREQ="500m", CPULIM="1", MEMREQ="100M",
                MEMLIM="200M")  # fmt: skip
    pods.create("besteffort", f"be{suffix}")


def exclusive_cpus(seen: dict[str, KernelPlacement], names: tuple[str, ...]) -> dict[str, CpuSet]:
    return {n: CpuSet.parse(seen[n].cpus) for n in names}


def check_new_around_old(seen: dict[str, KernelPlacement], old: dict[str, CpuSet]) -> None:
    taken = CpuSet.union_all(old.values())
    new = exclusive_cpus(seen, ("g2xc0", "g1xc0"))
    assert [len(new["g2xc0"]), len(new["g1xc0"])] == [2, 1], shown(seen)
    assert new["g2xc0"].isdisjoint(taken) and new["g1xc0"].isdisjoint(taken), shown(seen)
    assert new["g2xc0"].isdisjoint(new["g1xc0"])
    everyone_exclusive = taken | new["g2xc0"] | new["g1xc0"]
    for name in ("bc0", "bec0", "bxc0"):
        assert CpuSet.parse(seen[name].cpus).isdisjoint(everyone_exclusive), shown(seen)


def check_valid(
    seen: dict[str, KernelPlacement], exclusive: tuple[str, ...], shared: tuple[str, ...]
) -> None:
    """Each exclusive grant its size (g2: 2 CPUs, g1: 1), none shared with another or with a
    shared container."""
    grants = exclusive_cpus(seen, exclusive)
    assert [len(grants[n]) for n in exclusive] == [int(n[1]) for n in exclusive], shown(seen)
    assert len(CpuSet.union_all(grants.values())) == sum(map(len, grants.values())), shown(seen)
    taken = CpuSet.union_all(grants.values())
    for name in shared:
        assert CpuSet.parse(seen[name].cpus).isdisjoint(taken), shown(seen)


@pytest.fixture(scope="module")
def go_plugin() -> Path:
    try:
        return ensure_go_topology_aware()
    except BuildError as e:
        missing_peer(f"upstream's topology-aware plugin could not be built: {e}")


def test_from_the_go_plugin_to_ours_and_back(nodes: Nodes, go_plugin: Path) -> None:
    session = boot(nodes, N4C16, "n4c16")
    session.reset()
    node = session.node
    session.guest.copy_in(go_plugin, GO_PLUGIN, mode=0o755)
    start_go(node, 1)
    pods = session.pods()
    workload(pods)
    by_go = pods.kernel()
    old = exclusive_cpus(by_go, EXCLUSIVE)
    assert [len(old["g2c0"]), len(old["g1c0"])] == [2, 1], shown(by_go)

    # Go -> ours.
    assert node.stop_plugin(signal.SIGTERM) is not None
    node.start_daemon(CONFIG)
    by_ours = pods.kernel()
    report("go -> ours", moved(by_go, by_ours))
    assert exclusive_cpus(by_ours, EXCLUSIVE) == old, "ours moved an exclusive grant"
    pods.create("guaranteed", "g2x", CPU="2", MEM="100M")
    pods.create("guaranteed", "g1x", CPU="1", MEM="100M")
    pods.create("burstable", "bx", CPUREQ="500m", CPULIM="1", MEMREQ="100M", MEMLIM="200M")
    ours_more = pods.kernel()
    check_new_around_old(ours_more, old)

    # Ours -> Go, with a state directory of its own (as on a node it never ran on). What
    # upstream's plugin moves is its choice, reported, not asserted: it keeps its allocations
    # in its state directory and, without one, allocates every container afresh at its first
    # synchronization (seen: every container moved). Asserted: what it gives is valid.
    assert node.stop_plugin(signal.SIGTERM) == 0
    start_go(node, 2)
    back = pods.kernel()
    report("ours -> go", moved(ours_more, back))
    check_valid(back, ("g2c0", "g1c0", "g2xc0", "g1xc0"), ("bc0", "bec0", "bxc0"))
    node.stop_plugin(signal.SIGTERM)
