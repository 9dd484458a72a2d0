"""showContainersInNrt: balloon members as NodeResourceTopology subzones, as upstream's
GetTopologyZones exposes them (cmd/plugins/balloons/policy/balloons-policy.go); through the
NRT exporter into a real kube-apiserver with the NRT project's CRD."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from nri_resmgr.config.models import BalloonType
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.instrumentation.exports import TopologyZone
from nri_resmgr.kube import KubeClient
from nri_resmgr.observability.nrt import NODE_RESOURCE_TOPOLOGIES, NrtExporter
from nri_resmgr.policies.balloons import BalloonsPolicy
from tests.kube.test_nrt_apiserver import PolicySource, by_name, client, resource
from tests.policies.workload import Runtime, balloons_spec, burstable, guaranteed, start
from tests.sysfs.fakesys import N4C16

__all__ = ["client"]  # the fixture, imported for the apiserver test

SHOWN = BalloonType(name="shown", namespaces=("shown",), share_idle_cpus_in_same="numa")
HIDDEN = BalloonType(name="hidden", namespaces=("hidden",), show_containers_in_nrt=False)


def _policy(tmp_path: Path, show: bool | None) -> BalloonsPolicy:
    p = BalloonsPolicy()
    spec = balloons_spec(balloon_types=(SHOWN, HIDDEN), show_containers_in_nrt=show)
    start(p, tmp_path, N4C16, spec)
    return p


def _named(zones: list[TopologyZone]) -> dict[str, TopologyZone]:
    return {z.name: z for z in zones}


def test_containers_are_subzones_of_their_balloon_when_shown(tmp_path: Path) -> None:
    p = _policy(tmp_path, True)
    rt = Runtime(p)
    g = rt.create(guaranteed("g", 1500, namespace="shown"))
    rt.create(burstable("b", 500, 3000, namespace="shown"))
    h = rt.create(guaranteed("h", 1000, namespace="hidden"))
    zones = _named(p.topology_zones())
    balloon = p.state.members.get(g.id)
    assert balloon is not None and balloon.pool == "shown[0]"
    gz, bz = zones["shown/g/c0"], zones["shown/b/c0"]
    assert (gz.type, gz.parent) == ("allocation for container", "shown[0]")
    held = CpuSet.parse(rt.cpus[g.id] or "")
    # capacity: the tighter of its limit and its cpuset; allocatable: its request; available 0.
    (cpu,) = gz.resources
    assert (cpu.capacity, cpu.allocatable, cpu.available) == ("1500m", "1500m", "0")
    (cpu,) = bz.resources
    # Its 3000m limit is above what its cpuset allows.
    assert len(held) < 3
    assert (cpu.capacity, cpu.allocatable, cpu.available) == (str(len(held)), "500m", "0")
    assert dict(gz.attributes) == {"cpuset": rt.cpus[g.id], "memory set": rt.mems[g.id]}
    # The balloon zone: its own cpuset, the shared idle CPUs, and the unrequested excess.
    own = dict(zones["shown[0]"].attributes)
    assert CpuSet.parse(own["cpuset"]) | CpuSet.parse(own["shared cpuset"]) == held
    assert own["excess cpus"] == "0m"
    # A type's own false overrides the policy's true: the hidden balloon has no subzones.
    assert p.state.members.get(h.id) is not None
    assert not any(z.parent == "hidden[0]" for z in zones.values())
    assert "hidden/h/c0" not in zones


@pytest.mark.parametrize("show", [None, False])
def test_no_container_zones_unless_asked(tmp_path: Path, show: bool | None) -> None:
    p = _policy(tmp_path, show)
    rt = Runtime(p)
    rt.create(guaranteed("g", 1000, namespace="shown"))
    zones = p.topology_zones()
    assert [z.type for z in zones] == ["balloon"] * len(zones)
    assert "shown[0]" in _named(zones)


def test_a_type_can_show_its_containers_alone(tmp_path: Path) -> None:
    shown = BalloonType(name="shown", namespaces=("shown",), show_containers_in_nrt=True)
    p = BalloonsPolicy()
    start(p, tmp_path, N4C16, balloons_spec(balloon_types=(shown,)))
    rt = Runtime(p)
    rt.create(guaranteed("g", 1000, namespace="shown"))
    rt.create(guaranteed("d", 1000))
    subzones = [z for z in p.topology_zones() if z.type == "allocation for container"]
    assert [(z.name, z.parent) for z in subzones] == [("shown/g/c0", "shown[0]")]


def test_subzones_follow_a_removed_container(tmp_path: Path) -> None:
    p = _policy(tmp_path, True)
    rt = Runtime(p)
    g = rt.create(guaranteed("g", 1000, namespace="shown"))
    assert "shown/g/c0" in _named(p.topology_zones())
    rt.remove(g)
    assert "shown/g/c0" not in _named(p.topology_zones())


@pytest.mark.integration
async def test_container_subzones_reach_the_real_apiserver(
    client: KubeClient, tmp_path: Path
) -> None:
    p = _policy(tmp_path, True)
    rt = Runtime(p)
    g = rt.create(guaranteed("g", 2000, namespace="shown"))
    exporter = NrtExporter(client, "nrt-balloons-1", PolicySource(p), trio.sleep_forever)
    assert await exporter.publish()
    zones = by_name(await client.get(NODE_RESOURCE_TOPOLOGIES, "nrt-balloons-1"))
    sub = zones["shown/g/c0"]
    assert (sub["type"], sub["parent"]) == ("allocation for container", "shown[0]")
    assert resource(sub, "cpu") == {
        "name": "cpu", "capacity": "2", "allocatable": "2", "available": "0"
    }  # fmt: skip
    assert {"name": "cpuset", "value": rt.cpus[g.id]} in sub["attributes"]
    own = {a["name"]: a["value"] for a in zones["shown[0]"]["attributes"]}
    assert CpuSet.parse(own["cpuset"]) | CpuSet.parse(own["shared cpuset"]) == CpuSet.parse(
        rt.cpus[g.id] or ""
    )
    assert own["shared cpuset"] and own["excess cpus"] == "0m"
    # Removed: its subzone goes with the next write (and its balloon, empty, with it).
    rt.remove(g)
    assert await exporter.publish()
    after = by_name(await client.get(NODE_RESOURCE_TOPOLOGIES, "nrt-balloons-1"))
    assert "shown/g/c0" not in after and "default[0]" in after
    assert not any(z.get("parent") for z in after.values())
