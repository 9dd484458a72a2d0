"""balloons under a real containerd: reserved balloon on CPU 0, a one-CPU ``dedicated``
balloon type for namespace ``dedicated``, the built-in default balloon for everything else."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.runtime.containerd import Containerd
from tests.runtime.cri import BESTEFFORT, BURSTABLE_250M, GUARANTEED_1CPU, Cri, placement
from tests.runtime.daemon import Daemon

BALLOONS = """\
apiVersion: config.nri/v1alpha1
kind: BalloonsPolicy
metadata: {name: default}
spec:
  reservedResources: {cpu: "cpuset:0"}
  pinCPU: true
  pinMemory: true
  balloonTypes:
    - name: dedicated
      namespaces: [dedicated]
      minCPUs: 1
      maxCPUs: 1
"""


@pytest.fixture
def balloons(containerd: Containerd, tmp_path: Path) -> Iterator[Daemon]:
    d = Daemon(containerd, tmp_path, BALLOONS)
    try:
        d.start()
        yield d
    finally:
        d.kill()


def test_balloons_place_each_class_and_hand_a_dedicated_cpu_back(
    cri: Cri, balloons: Daemon
) -> None:
    system = cri.run("kube-proxy", BESTEFFORT, namespace="kube-system")
    dedicated = cri.run("g", GUARANTEED_1CPU, namespace="dedicated")
    s, g = placement(system), placement(dedicated)
    assert (s.cpus, s.allowed) == ("0", "0"), "kube-system runs in the reserved balloon"
    assert (g.cpus, g.allowed, g.mems) == ("1", "1", "0"), "the dedicated balloon has CPU 1"

    cri.remove_pod(dedicated.pod_id)
    besteffort = cri.run("be", BESTEFFORT)
    burstable = cri.run("bu", BURSTABLE_250M)
    be, bu = placement(besteffort), placement(burstable)
    assert be.cpus == bu.cpus == "1", "the default balloon got the freed CPU"
    assert placement(system).cpus == "0"
