"""One containerd per test session (built and cached on first use), a fresh daemon per test.

Under CI=true a part that cannot be built or run fails the tests; elsewhere it skips them
with the reason, so a developer machine without root still runs the rest of the suite.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from tests.conformance.build import cache_dir
from tests.peers import in_ci
from tests.runtime.build import (
    RUNTIME_PACKAGES,
    PeerUnavailable,
    ensure_containerd,
    ensure_packages,
)
from tests.runtime.containerd import Containerd
from tests.runtime.cri import Cri
from tests.runtime.daemon import LIVE, Daemon
from tests.runtime.ociimage import IMAGE_NAME, make_image


def unavailable(reason: str) -> NoReturn:
    """Fails under CI (``CI=true``, ``1`` or ``yes``: ``tests.peers.in_ci``), skips elsewhere."""
    if in_ci():
        pytest.fail(f"real-runtime peer unavailable under CI: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def containerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Containerd]:
    if os.geteuid() != 0:
        unavailable("containerd needs root (cgroups, mounts)")
    if not Path("/sys/fs/cgroup/cpuset/cpuset.cpus").exists():
        unavailable("needs the cgroup v1 cpuset hierarchy at /sys/fs/cgroup/cpuset")
    try:
        ensure_packages(RUNTIME_PACKAGES)
        bindir = ensure_containerd()
    except PeerUnavailable as exc:
        unavailable(str(exc))
    # A short path: containerd's socket paths must stay under the unix socket length limit.
    workdir = Path(f"/tmp/nrc-{secrets.token_hex(3)}")
    workdir.mkdir()
    runtime = Containerd(bindir, workdir, IMAGE_NAME, shutil.which("runc") or "runc")
    runtime.write_config()
    try:
        runtime.start()
        runtime.import_image(make_image(cache_dir() / "runtime" / "busybox-oci.tar"))
    except (PeerUnavailable, RuntimeError, TimeoutError) as exc:
        runtime.cleanup()
        unavailable(f"containerd did not start: {exc}")
    try:
        yield runtime
    finally:
        for daemon in list(LIVE):
            daemon.kill()
        runtime.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def cri(containerd: Containerd, tmp_path: Path) -> Iterator[Cri]:
    cri = Cri(containerd, f"/nri-resmgr-test-{secrets.token_hex(3)}", tmp_path)
    try:
        yield cri
    finally:
        if containerd.proc is None:
            containerd.start()
        containerd.remove_all_pods()
        cri.remove_cgroups()


TOPOLOGY_AWARE = """\
apiVersion: config.nri/v1alpha1
kind: TopologyAwarePolicy
metadata: {name: default}
spec:
  reservedResources: {cpu: "cpuset:%s"}
  pinCPU: true
  pinMemory: true
"""


@pytest.fixture
def daemon(containerd: Containerd, tmp_path: Path) -> Iterator[Daemon]:
    """Our daemon (topology-aware, CPU 0 reserved, CPU 1 for the rest), not yet started."""
    d = Daemon(containerd, tmp_path, TOPOLOGY_AWARE % "0")
    try:
        yield d
    finally:
        d.kill()
