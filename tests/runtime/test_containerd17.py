"""containerd 1.7 (NRI v0.6, container events as StateChange) as a second real peer: the
registration and placement subset, so the older protocol path runs against a real runtime.

A module-scoped instance beside the session's containerd 2: its own directory, sockets and
cgroup root; the same hand-made image.
"""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conformance.build import cache_dir
from tests.runtime.build import PeerUnavailable, ensure_legacy_containerd
from tests.runtime.conftest import TOPOLOGY_AWARE, unavailable
from tests.runtime.containerd import CONFIG_1_7, Containerd
from tests.runtime.cri import BESTEFFORT, BURSTABLE_250M, GUARANTEED_1CPU, MIB, Cri, placement
from tests.runtime.daemon import Daemon
from tests.runtime.ociimage import IMAGE_NAME, make_image


@pytest.fixture(scope="module")
def containerd17(containerd: Containerd) -> Iterator[Containerd]:
    try:
        bindir = ensure_legacy_containerd()
    except PeerUnavailable as exc:
        unavailable(str(exc))
    workdir = Path(f"/tmp/nrc17-{secrets.token_hex(3)}")
    workdir.mkdir()
    runtime = Containerd(bindir, workdir, IMAGE_NAME, shutil.which("runc") or "runc",
                         config=CONFIG_1_7, crictl=containerd.crictl_path)  # fmt: skip
    runtime.write_config()
    try:
        runtime.start()
        runtime.import_image(make_image(cache_dir() / "runtime" / "busybox-oci.tar"))
    except (PeerUnavailable, RuntimeError, TimeoutError) as exc:
        runtime.cleanup()
        unavailable(f"containerd 1.7 did not start: {exc}")
    try:
        yield runtime
    finally:
        runtime.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def cri17(containerd17: Containerd, tmp_path: Path) -> Iterator[Cri]:
    cri = Cri(containerd17, f"/nri-resmgr-test17-{secrets.token_hex(3)}", tmp_path)
    try:
        yield cri
    finally:
        containerd17.remove_all_pods()
        cri.remove_cgroups()


@pytest.fixture
def daemon17(containerd17: Containerd, tmp_path: Path) -> Iterator[Daemon]:
    d = Daemon(containerd17, tmp_path, TOPOLOGY_AWARE % "0")
    try:
        d.start()
        yield d
    finally:
        d.kill()


def test_containerd_1_7_registers_our_plugin_and_it_places_every_class(
    containerd17: Containerd, cri17: Cri, daemon17: Daemon
) -> None:
    # NRI v0.6 logs no PID: the daemon fixture waited for `plugin "90-resource-manager"
    # connected` in containerd's log; the daemon names the runtime that configured it.
    assert "configured by containerd v1.7.24" in daemon17.log_path.read_text()
    system = cri17.run("kube-proxy", BESTEFFORT, namespace="kube-system")
    besteffort = cri17.run("be", BESTEFFORT)
    burstable = cri17.run("bu", BURSTABLE_250M)
    ks, be, bu = placement(system), placement(besteffort), placement(burstable)
    assert (ks.cpus, ks.allowed) == ("0", "0")
    assert (be.cpus, be.allowed) == ("1", "1")
    assert (bu.cpus, bu.allowed, bu.shares, bu.memory_limit) == ("1", "1", 256, 64 * MIB)


def test_containerd_1_7_exclusive_cpu_and_its_return_after_removal(
    cri17: Cri, daemon17: Daemon
) -> None:
    system = cri17.run("coredns", BESTEFFORT, namespace="kube-system")
    guaranteed = cri17.run("g", GUARANTEED_1CPU)
    assert (placement(guaranteed).cpus, placement(guaranteed).allowed) == ("1", "1")
    assert placement(system).cpus == "0"
    cri17.remove_pod(guaranteed.pod_id)
    after = cri17.run("be", BESTEFFORT)
    assert placement(after).cpus == "1"
