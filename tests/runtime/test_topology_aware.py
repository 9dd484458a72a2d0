"""topology-aware under a real containerd: every placement read back from the kernel.

The machine has 2 CPUs: CPU 0 is reserved, CPU 1 is the shared pool and the only CPU an
exclusive grant can take, so each scenario below is meaningful on it.
"""

from __future__ import annotations

from tests.runtime.conftest import TOPOLOGY_AWARE
from tests.runtime.containerd import Containerd, wait_for
from tests.runtime.cri import (
    BESTEFFORT,
    BURSTABLE_250M,
    GUARANTEED_1CPU,
    MIB,
    PERIOD,
    Cri,
    placement,
)
from tests.runtime.daemon import PLUGIN, Daemon, registered_pids


def test_containerd_logs_our_plugin_registered_under_its_name_and_index(
    containerd: Containerd, daemon: Daemon
) -> None:
    daemon.start()
    assert daemon.proc is not None
    assert daemon.proc.pid in registered_pids(containerd)
    assert f'plugin \\"{PLUGIN}\\" connected and synchronized' in containerd.log_text()


def test_each_qos_class_lands_where_its_class_belongs_with_kubelets_limits(
    cri: Cri, daemon: Daemon
) -> None:
    daemon.start()
    system = cri.run("kube-proxy", BESTEFFORT, namespace="kube-system")
    besteffort = cri.run("be", BESTEFFORT)
    burstable = cri.run("bu", BURSTABLE_250M)

    ks, be, bu = placement(system), placement(besteffort), placement(burstable)
    assert (ks.cpus, ks.allowed, ks.mems) == ("0", "0", "0"), "kube-system runs on reserved"
    assert (be.cpus, be.allowed) == ("1", "1"), "BestEffort runs on the shared pool"
    assert (bu.cpus, bu.allowed) == ("1", "1"), "Burstable runs on the shared pool"
    # The plugin changed only the cpuset: kubelet's shares, quota and limits stand.
    assert (be.shares, be.quota) == (2, -1)
    assert (bu.shares, bu.quota, bu.memory_limit) == (256, -1, 64 * MIB)


def test_a_guaranteed_container_on_the_last_shared_cpu_shares_it_pinned_and_off_reserved(
    cri: Cri, daemon: Daemon
) -> None:
    """With one non-reserved CPU (this 2-CPU machine, reserved cpuset:0), an exclusive grant
    would empty the root pool, whose last shared CPU is never sliced (nri-plugins would, and
    leave the containers unpinned): the Guaranteed container shares CPU 1,
    pinned, and the reserved CPU stays the kube-system container's. Exclusive CPUs under the
    real runtime are shown by the balloons test (a dedicated balloon)."""
    daemon.start()
    system = cri.run("coredns", BESTEFFORT, namespace="kube-system")
    guaranteed = cri.run("g", GUARANTEED_1CPU)

    g = placement(guaranteed)
    assert (g.cpus, g.allowed, g.mems) == ("1", "1", "0")
    assert (g.shares, g.quota, g.memory_limit) == (1024, PERIOD, 64 * MIB)
    assert placement(system).cpus == "0", "the reserved CPU is the kube-system container's"
    # On one free CPU an exclusive and a shared grant look alike in the kernel: the policy's
    # own account says which it made.
    assert "default/g/g: shared in socket #0: cpus 1" in daemon.log_path.read_text()

    cri.remove_pod(guaranteed.pod_id)
    after = cri.run("be", BESTEFFORT)
    assert placement(after).cpus == "1", "the shared pool is still CPU 1"


def test_a_guaranteed_container_arriving_beside_a_shared_one_leaves_both_pinned(
    cri: Cri, daemon: Daemon
) -> None:
    """Issue 12's defect seen by a real runtime: an exclusive grant that empties the shared
    pool left the shared container with an empty cpuset, i.e. on every CPU. With one
    non-reserved CPU the Guaranteed container must share it (no exclusive grant is possible
    without emptying the pool), and neither container may reach the reserved CPU."""
    daemon.start()
    besteffort = cri.run("be", BESTEFFORT)
    guaranteed = cri.run("g", GUARANTEED_1CPU)
    be, g = placement(besteffort), placement(guaranteed)
    assert (be.cpus, be.allowed) == ("1", "1")
    assert (g.cpus, g.allowed) == ("1", "1")


def test_a_changed_config_file_moves_running_containers_in_their_cgroups(
    cri: Cri, daemon: Daemon
) -> None:
    daemon.start()
    system = cri.run("kube-proxy", BESTEFFORT, namespace="kube-system")
    besteffort = cri.run("be", BESTEFFORT)
    assert (placement(system).cpus, placement(besteffort).cpus) == ("0", "1")

    daemon.config.write_text(TOPOLOGY_AWARE % "1")
    wait_for(
        "the reserved pool to move to CPU 1",
        lambda: placement(system).cpus == "1" and placement(besteffort).cpus == "0",
    )
    assert placement(system).allowed == "1"
    assert placement(besteffort).allowed == "0"
