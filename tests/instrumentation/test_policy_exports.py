"""Policy gauges and NRT zones from the policies' own state (the hook behind /metrics and the
NodeResourceTopology object)."""

from __future__ import annotations

from pathlib import Path

import pytest
from grpclib.exceptions import GRPCError

from nri_resmgr._gen import pluginregistration as pb
from nri_resmgr.config.models import BalloonType
from nri_resmgr.dra.kubeletplugin.registration import Registrar
from nri_resmgr.instrumentation.exports import PolicyGauge
from nri_resmgr.instrumentation.health import READINESS
from nri_resmgr.policies.balloons import BalloonsPolicy
from nri_resmgr.policies.template import TemplatePolicy
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from tests.policies.workload import balloons_spec, guaranteed, start, topology_spec
from tests.sysfs.fakesys import N4C16

APP = BalloonType(name="app", namespaces=("default",), max_cpus=4)


def gauge(gauges: list[PolicyGauge], name: str, **labels: str) -> PolicyGauge:
    (found,) = [
        g for g in gauges
        if g.name == name and all(dict(g.labels).get(k) == v for k, v in labels.items())
    ]  # fmt: skip
    return found


def test_balloons_export_one_gauge_and_one_zone_per_balloon(tmp_path: Path) -> None:
    policy = BalloonsPolicy()
    start(policy, tmp_path, N4C16, balloons_spec(balloon_types=(APP,)))
    pod, ctr = guaranteed("g", 2000)
    policy.create_container(pod, ctr)
    g = gauge(policy.gauges(), "nri_policy_balloons_cores", balloon="app[0]")
    labels = dict(g.labels)
    assert g.value == 2
    member = policy.state.members.get(ctr.id)
    assert member is not None
    assert (labels["balloon_type"], labels["cpus_count"], labels["containers"]) == (
        "app", "2", member.name
    )  # fmt: skip
    assert labels["tot_req_millicpu"] == "2000"
    zone = next(z for z in policy.topology_zones() if z.name == "app[0]")
    (cpu,) = zone.resources
    assert (zone.type, cpu.capacity, cpu.allocatable, cpu.available) == ("balloon", "16", "4", "2")


def test_topology_aware_gauges_count_containers_per_zone(tmp_path: Path) -> None:
    policy = TopologyAwarePolicy()
    start(policy, tmp_path, N4C16, topology_spec(reserved="cpuset:0"))
    pod, ctr = guaranteed("g", 1000)
    policy.create_container(pod, ctr)
    a = policy.engine.allocation(ctr.id)
    assert a is not None
    gauges = policy.gauges()
    count = "nri_policy_topologyaware_zone_container_count"
    assert gauge(gauges, count, zone=a.pool).value == 1
    assert sum(g.value for g in gauges if g.name == count) == 1
    capacity = gauge(gauges, "nri_policy_topologyaware_zone_cpu_capacity_cores", zone="root")
    assert (capacity.value, dict(capacity.labels)["cpus"]) == (16, "0-15")


def test_a_policy_without_exports_has_none(tmp_path: Path) -> None:
    assert TemplatePolicy().gauges() == [] and TemplatePolicy().topology_zones() == []


async def test_kubelet_registration_sets_dra_readiness(tmp_path: Path) -> None:
    READINESS.reset()
    READINESS.require("dra")
    registrar = Registrar("template.nri.io", tmp_path / "dra.sock")
    assert READINESS.missing() == ["dra"]
    await registrar.notify(pb.RegistrationStatus(plugin_registered=True))
    assert READINESS.ready
    with pytest.raises(GRPCError):  # kubelet reports a failed registration: not ready again
        await registrar.notify(pb.RegistrationStatus(plugin_registered=False, error="no"))
    assert READINESS.missing() == ["dra"]
    READINESS.reset()
