"""Restarts, shutdown and a stalled plugin under a real containerd (topology-aware, CPU 0
reserved): what the kernel shows for running containers before and after each event."""

from __future__ import annotations

import os
import signal
import time

from tests.runtime.containerd import REQUEST_TIMEOUT, Containerd, wait_for
from tests.runtime.cri import BESTEFFORT, BURSTABLE_250M, GUARANTEED_1CPU, Cri, placement
from tests.runtime.daemon import PLUGIN, Daemon, registrations

ALL = "0-1"  # what a container inherits from its parent when no plugin pinned it


def test_a_restarted_daemon_keeps_placements_and_places_what_was_created_meanwhile(
    cri: Cri, daemon: Daemon
) -> None:
    daemon.start()
    system = cri.run("kube-proxy", BESTEFFORT, namespace="kube-system")
    guaranteed = cri.run("g", GUARANTEED_1CPU)
    assert (placement(system).cpus, placement(guaranteed).cpus) == ("0", "1")

    assert daemon.terminate() == 0
    late = cri.run("coredns", BESTEFFORT, namespace="kube-system")
    assert placement(late).cpus == ALL, "nobody pinned it while the daemon was down"

    daemon.start()
    wait_for("the late container to be placed on reserved", lambda: placement(late).cpus == "0")
    assert placement(late).allowed == "0"
    assert placement(system).cpus == "0"
    assert (placement(guaranteed).cpus, placement(guaranteed).allowed) == ("1", "1")


def test_a_restarted_containerd_gets_our_plugin_back_and_resynchronized(
    containerd: Containerd, cri: Cri, daemon: Daemon
) -> None:
    daemon.start()
    system = cri.run("kube-proxy", BESTEFFORT, namespace="kube-system")
    burstable = cri.run("bu", BURSTABLE_250M)
    before = registrations(containerd)

    containerd.restart()
    daemon.wait_registered(before)
    # containerd logs the plugin synchronized when it has the reply; the daemon's own line may
    # reach its log file a moment later (seen once in CI under load).
    synced = "synchronizing 2 pods, 2 containers"
    wait_for("the daemon to log it resynchronized", lambda: synced in daemon.log_path.read_text())
    assert (placement(system).cpus, placement(burstable).cpus) == ("0", "1")
    new = cri.run("be", BESTEFFORT)
    assert (placement(new).cpus, placement(new).allowed) == ("1", "1")


def test_sigterm_exits_0_leaves_containers_alone_and_creation_works_without_us(
    containerd: Containerd, cri: Cri, daemon: Daemon
) -> None:
    daemon.start()
    system = cri.run("kube-proxy", BESTEFFORT, namespace="kube-system")
    besteffort = cri.run("be", BESTEFFORT)

    assert daemon.terminate() == 0
    wait_for(
        "containerd to see the plugin go",
        lambda: f'connection to plugin \\"{PLUGIN}\\" closed' in containerd.log_text(),
    )
    assert (placement(system).cpus, placement(besteffort).cpus) == ("0", "1")
    unmanaged = cri.run("after", BESTEFFORT)
    assert placement(unmanaged).cpus == ALL


def test_a_stalled_plugin_does_not_hold_container_creation_past_the_request_timeout(
    containerd: Containerd, cri: Cri, daemon: Daemon
) -> None:
    """SIGSTOP makes the plugin answer nothing (no test hook in the product): containerd must
    give up on it after its request timeout and create the container anyway; once resumed,
    the daemon notices the closed connection, re-registers and places again."""
    daemon.start()
    assert daemon.proc is not None
    before = registrations(containerd)
    os.kill(daemon.proc.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        # crictl's own deadline: three request timeouts, so a wedge fails the call.
        stalled = cri.run("stalled", BESTEFFORT, timeout=f"{3 * REQUEST_TIMEOUT:g}s")
        elapsed = time.monotonic() - started
        assert placement(stalled).cpus == ALL, "created without the plugin's adjustment"
    finally:
        os.kill(daemon.proc.pid, signal.SIGCONT)
    print(f"CreateContainer with a stalled plugin: pod+container in {elapsed:.2f}s")
    assert f"closing plugin {PLUGIN}, failed to handle" in containerd.log_text()

    daemon.wait_registered(before)
    after = cri.run("after", BESTEFFORT)
    assert placement(after).cpus == "1"
