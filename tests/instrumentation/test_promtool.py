"""Prometheus' own linter on what /metrics serves (issue 34 item 14): ``promtool check
metrics``, built from its published Go module (``promtoolbuild.py``), on each policy's output
with every instrument in use.

The decision on upstream's names: nri-plugins calls two topology-aware gauges
``nri_policy_topologyaware_zone_container_count`` and ``..._shared_container_count``, and
the ``_count`` suffix is reserved for histograms and summaries. Both are exported under
upstream's names (dashboards built for nri-plugins keep working; their HELP says they are
deprecated) and under lint-clean ones (``..._containers``, ``..._shared_containers``). So
promtool's only complaints are about those two names, and this test fails on any other.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.exposition import choose_encoder

from nri_resmgr.instrumentation import metrics
from nri_resmgr.policies.balloons import BalloonsPolicy
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from nri_resmgr.resmgr.policy import Policy
from tests.instrumentation.promtoolbuild import ensure_promtool
from tests.kube.gobuild import BuildError
from tests.peers import missing_peer
from tests.policies.workload import balloons_spec, besteffort, guaranteed, start, topology_spec
from tests.sysfs.fakesys import N4C16

pytestmark = pytest.mark.integration

UPSTREAM_NAMES = {
    "topology-aware": [
        "nri_policy_topologyaware_zone_container_count non-histogram and non-summary metrics "
        'should not have "_count" suffix',
        "nri_policy_topologyaware_zone_shared_container_count non-histogram and non-summary "
        'metrics should not have "_count" suffix',
    ],
    "balloons": [],
}


@pytest.fixture(scope="module")
def promtool() -> Path:
    try:
        return ensure_promtool()
    except BuildError as exc:
        missing_peer(str(exc))


@pytest.fixture
def exported() -> Iterator[None]:
    yield
    metrics.follow(lambda: None, lambda: 0)


def scrape(policy: Policy) -> bytes:
    """What /metrics answers a Prometheus scraper (the server's own encoder choice), with
    the policy's gauges and every request instrument holding a sample."""
    metrics.follow(lambda: policy, lambda: 7)
    prom = metrics.enable()
    for kind, method in (("nri", "CreateContainer"), ("dra", "NodePrepareResources")):
        instruments = prom.Instruments(kind, method)
        instruments.ok.inc()
        instruments.error.inc()
        instruments.latency.observe(0.0015)
    prom.CONFIG_RELOADS.labels("applied").inc()
    encoder, content_type = choose_encoder("")
    assert content_type.startswith("text/plain; version=0.0.4")
    data: bytes = encoder(prom.REGISTRY)
    return data


@pytest.mark.parametrize("name", sorted(UPSTREAM_NAMES))
def test_promtool_finds_nothing_but_upstreams_two_names(
    promtool: Path, exported: None, tmp_path: Path, name: str
) -> None:
    policy: Policy
    if name == "topology-aware":
        policy = start(TopologyAwarePolicy(), tmp_path, N4C16, topology_spec())
    else:
        policy = start(BalloonsPolicy(), tmp_path, N4C16, balloons_spec())
    policy.create_container(*guaranteed("g", 2000))
    policy.create_container(*besteffort("be"))
    text = scrape(policy)
    assert b"nri_policy_" in text and b"nri_resmgr_nri_request_duration_seconds_bucket" in text
    result = subprocess.run([str(promtool), "check", "metrics"], input=text,
                            capture_output=True, timeout=60, check=False)  # fmt: skip
    problems = (result.stdout + result.stderr).decode().strip().splitlines()
    assert problems == UPSTREAM_NAMES[name], problems
    assert result.returncode == (3 if problems else 0)
    if name == "topology-aware":
        # The same figures under the lint-clean names.
        for clean in ("zone_containers{", "zone_shared_containers{"):
            assert f"nri_policy_topologyaware_{clean}".encode() in text
