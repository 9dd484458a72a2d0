"""Balloon types as DRA devices (issue 38 items 1-2): devices per published type and NUMA node
(or socket), Prepare making a balloon of the claim's type with exactly the consumed CPUs,
binding, unprepare, restore, and the refusals."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from nri_resmgr.config.models import BalloonComponent, BalloonType, BalloonTypeDra
from nri_resmgr.config.validate import validate_spec
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.dra.cpu.driver import slice_device
from nri_resmgr.dra.kubeletplugin.devices import RequestPolicy
from nri_resmgr.errors import ConfigError
from nri_resmgr.policies.balloons import BalloonsPolicy
from nri_resmgr.policies.balloons.balloon import Balloon
from nri_resmgr.policies.balloons.dra import device_name
from nri_resmgr.resmgr.model import ClaimGrant, Container, Pod
from tests.dra.balloon_setup import (
    BASE_KHZ,
    FAST,
    NATIVE,
    TURBO_KHZ,
    WIDE,
    balloon_claim,
    balloons_node,
    capacities,
    claim_balloons,
    dra_balloons_spec,
    max_freq,
    native_cpus,
    turbo_control,
    write_max_freq,
)
from tests.dra.claim_setup import Node, with_claim_env
from tests.policies.workload import besteffort
from tests.sysfs.fakesys import N4C16, write_sysfs

UID = "0b6f1c2e-9d4a-4e57-8a3b-2c1d5e6f7a80"
OTHER = "0b6f1c2e-9d4a-4e57-8a3b-2c1d5e6f7a81"
ANN = "balloon.balloons.resource-policy.nri.io"
NUMA = {n: CpuSet(range(4 * n, 4 * n + 4)) for n in range(4)}


def cpus_of(node: Node, cid: str) -> CpuSet:
    return CpuSet.parse(node.runtime.cpus[cid] or "")


def annotated(name: str, balloon_type: str) -> tuple[Pod, Container]:
    p, c = besteffort(name)
    return attrs.evolve(p, annotations={f"{ANN}/pod": balloon_type}), c


async def prepare(node: Node, uid: str, device: str, cpus: int) -> str:
    node.claims.add(balloon_claim(uid, device, cpus))
    [outcome] = (await node.preparer.prepare([node.ref(uid)])).values()
    return outcome.error


def test_each_published_type_offers_one_device_per_numa_node_or_socket(tmp_path: Path) -> None:
    node = balloons_node(tmp_path)
    devices = node.policy.dra_devices()
    names = [d.name for d in devices]
    assert names == [*(f"fast-numa{n}" for n in range(4)), "wide-socket0", "wide-socket1"]
    free = node.policy.state.free()
    for d in devices:
        # What a new balloon of the type can get there now: free CPUs, at most maxCPUs.
        limit = 4 if d.name.startswith("fast") else 8
        assert d.capacity == {"cpu": min(limit, len(free & CpuSet(d.cpus)))}, d.name
        assert d.shared
    # The reserved balloon holds a CPU: its NUMA node offers one less.
    assert sum(capacities(node)[f"fast-numa{n}"] for n in range(4)) == 15
    fast2 = devices[2]
    assert fast2.attributes == {
        "balloonType": "fast", "cpuClass": "", "isolated": False, "hideHyperthreads": False,
        "numCPUs": 4, "smtEnabled": True, "numaNode": 2,
        "resource.kubernetes.io/numaNode": 2, "socketID": 1,
    }  # fmt: skip
    assert devices[5].attributes["socketID"] == 1 and "numaNode" not in devices[5].attributes
    assert slice_device(fast2).allow_multiple_allocations


def test_device_names_are_dns_labels_and_distinct_for_any_type_name() -> None:
    a, b = device_name("Fast_Lane", "numanode", 0), device_name("fast-lane", "numanode", 0)
    assert a != b and b == "fast-lane-numa0"
    assert a == device_name("Fast_Lane", "numanode", 0)  # stable
    long = device_name("x" * 64, "socket", 1)
    assert len(long) <= 63 and long.endswith("-socket1")
    for name in (a, long, device_name("___", "numanode", 3)):
        assert name.replace("-", "").isalnum() and name == name.lower(), name


async def test_prepare_makes_a_balloon_of_the_type_with_exactly_the_consumed_cpus(
    tmp_path: Path,
) -> None:
    node = balloons_node(tmp_path)
    assert await prepare(node, UID, "fast-numa2", 3) == ""
    [b] = claim_balloons(node).values()
    assert b.type.name == "fast" and len(b.cpus) == 3 and b.cpus.issubset(NUMA[2])
    assert node.driver.store.records[UID].cpus == b.cpus
    # The device counts its claim back in (the scheduler subtracts what claims consume);
    # the socket device of the other type offers three CPUs less.
    caps = capacities(node)
    assert caps["fast-numa2"] == 4 and caps["wide-socket1"] == 5
    # The claim's container runs in it; a native member of the same type never does.
    pod_, c = besteffort("app")
    app = node.runtime.create((pod_, node.injected(c, UID)))
    assert cpus_of(node, app.id) == b.cpus and app.id in b.members
    native = node.runtime.create(annotated("nat", "fast"))
    assert cpus_of(node, native.id).isdisjoint(b.cpus)
    assert b.cpus.isdisjoint(native_cpus(node))


async def test_the_claims_balloon_gets_its_types_cpu_class(tmp_path: Path) -> None:
    write_sysfs(tmp_path, N4C16)
    write_max_freq(tmp_path, range(16))
    turbo = attrs.evolve(FAST, cpu_class="turbo")
    node = balloons_node(tmp_path, dra_balloons_spec(turbo, NATIVE, control=turbo_control()))
    assert await prepare(node, UID, "fast-numa1", 2) == ""
    [b] = claim_balloons(node).values()
    assert {cpu: max_freq(tmp_path, cpu) for cpu in b.cpus} == dict.fromkeys(b.cpus, TURBO_KHZ)
    others = set(range(16)) - set(b.cpus)
    assert {max_freq(tmp_path, cpu) for cpu in others} == {BASE_KHZ}
    await node.preparer.unprepare([node.ref(UID)])
    assert {max_freq(tmp_path, cpu) for cpu in range(16)} == {BASE_KHZ}  # restored


async def test_a_forged_claim_variable_does_not_get_the_claims_balloon(tmp_path: Path) -> None:
    node = balloons_node(tmp_path)
    assert await prepare(node, UID, "fast-numa1", 2) == ""
    [b] = claim_balloons(node).values()
    p, c = besteffort("forger")
    forged = node.runtime.create((p, with_claim_env(c, UID, str(b.cpus), key="guess")))
    assert cpus_of(node, forged.id).isdisjoint(b.cpus) and not b.members
    # Another namespace with the right key is refused too.
    p2, c2 = besteffort("elsewhere")
    p2 = attrs.evolve(p2, namespace="other")
    stranger = node.runtime.create((p2, node.injected(c2, UID)))
    assert cpus_of(node, stranger.id).isdisjoint(b.cpus)


async def test_unprepare_removes_the_balloon_and_the_cpus_are_free_again(tmp_path: Path) -> None:
    node = balloons_node(tmp_path)
    before = capacities(node)
    assert await prepare(node, UID, "wide-socket1", 6) == ""
    [b] = claim_balloons(node).values()
    assert b.type.name == "wide" and len(b.cpus) == 6 and b.cpus.issubset(NUMA[2] | NUMA[3])
    left = capacities(node)  # a device offering nothing is not published
    assert left.get("fast-numa2", 0) + left.get("fast-numa3", 0) == 2
    await node.preparer.unprepare([node.ref(UID)])
    assert claim_balloons(node) == {} and capacities(node) == before
    assert b.cpus.issubset(node.policy.state.free())


async def test_a_claims_container_running_at_unprepare_is_placed_natively(tmp_path: Path) -> None:
    node = balloons_node(tmp_path)
    assert await prepare(node, UID, "fast-numa3", 2) == ""
    p, c = besteffort("late")
    app = node.runtime.create((p, node.injected(c, UID)))
    await node.preparer.unprepare([node.ref(UID)])
    assert claim_balloons(node) == {}
    assert app.id in node.policy.state.members
    assert cpus_of(node, app.id).issubset(native_cpus(node))


async def test_restart_rebuilds_the_claim_balloons_before_synchronize(tmp_path: Path) -> None:
    node = balloons_node(tmp_path)
    assert await prepare(node, UID, "fast-numa2", 2) == ""
    assert await prepare(node, OTHER, "wide-socket0", 5) == ""
    held = {u: b.cpus for u, b in claim_balloons(node).items()}
    p, c = besteffort("app")
    app = node.runtime.create((p, node.injected(c, UID)))
    nat = node.runtime.create(annotated("nat", "native"))
    restarted = node.restart()
    # Restored from the records before any NRI request, then Synchronize keeps everything.
    assert {u: b.cpus for u, b in claim_balloons(restarted).items()} == held
    restarted.runtime.apply(restarted.policy.synchronize(*restarted.runtime.reported()))
    balloons = claim_balloons(restarted)
    assert {u: b.cpus for u, b in balloons.items()} == held
    assert app.id in balloons[UID].members and cpus_of(restarted, app.id) == held[UID]
    assert cpus_of(restarted, nat.id).isdisjoint(held[UID] | held[OTHER])


BAD = [
    ("fast-numa2", 5, "more than the group's 4 CPUs"),
    ("fast-numa9", 1, "unknown device(s) fast-numa9"),
    ("wide-socket1", 9, "more than the group's 8 CPUs"),
]


@pytest.mark.parametrize(("device", "cpus", "error"), BAD)
async def test_claims_the_type_cannot_host_fail_and_leave_nothing(
    tmp_path: Path, device: str, cpus: int, error: str
) -> None:
    node = balloons_node(tmp_path)
    assert error in await prepare(node, UID, device, cpus)
    assert claim_balloons(node) == {} and list(node.cdi_dir.glob("*")) == []


async def test_a_claim_outside_min_and_max_cpus_is_refused(tmp_path: Path) -> None:
    sized = attrs.evolve(FAST, min_cpus=2, max_cpus=3)
    node = balloons_node(tmp_path, dra_balloons_spec(sized, NATIVE))
    assert capacities(node)["fast-numa3"] == 3  # at most maxCPUs for a new balloon
    # The scheduler rounds a smaller request up to minCPUs (a request naming none too).
    policy = slice_device(node.policy.dra_devices()[3]).capacity["cpu"].request_policy
    assert policy == RequestPolicy(minimum=2, step=1, default=2)
    assert "4 CPUs do not make a balloon of type 'fast' (minCPUs 2, maxCPUs 3)" in await prepare(
        node, UID, "fast-numa3", 4
    )
    assert "1 CPUs do not make" in await prepare(node, OTHER, "fast-numa3", 1)
    assert claim_balloons(node) == {}


async def test_max_balloons_counts_claim_balloons_and_native_ones(tmp_path: Path) -> None:
    one = attrs.evolve(FAST, max_balloons=1)
    node = balloons_node(tmp_path, dra_balloons_spec(one, NATIVE))
    assert await prepare(node, UID, "fast-numa1", 2) == ""
    # No new balloon of the type can be had: the other devices offer nothing.
    assert capacities(node) == {"fast-numa1": 2}
    assert "maxBalloons 1" in await prepare(node, OTHER, "fast-numa1", 1)
    p, c = annotated("nat", "fast")
    with pytest.raises(Exception, match="no suitable balloon"):
        node.policy.create_container(p, c)


async def test_native_balloons_never_grow_into_claimed_cpus(tmp_path: Path) -> None:
    node = balloons_node(tmp_path)
    assert await prepare(node, UID, "wide-socket0", 7) == ""
    [b] = claim_balloons(node).values()
    big = [node.runtime.create(annotated(f"n{i}", "native")) for i in range(3)]
    for c in big:
        assert cpus_of(node, c.id).isdisjoint(b.cpus), c.name
    assert len(b.cpus) == 7


def test_devices_changed_is_called_when_native_balloons_change_the_offer(tmp_path: Path) -> None:
    node = balloons_node(tmp_path)
    calls: list[int] = []
    node.policy.devices_changed = lambda: calls.append(1)
    node.runtime.create(annotated("a", "fast"))  # a native balloon takes a free CPU
    assert calls == [1]
    p, c = besteffort("plain")  # joins the default balloon: may or may not change the offer
    before = capacities(node)
    node.runtime.create((p, c))
    assert len(calls) == (1 if capacities(node) == before else 2)


@pytest.mark.parametrize(
    ("bt", "error"),
    [
        (BalloonType(name="default", dra=BalloonTypeDra(publish=True)), "built-in 'default'"),
        (BalloonType(name="reserved", dra=BalloonTypeDra(publish=True)), "built-in 'reserved'"),
        (
            BalloonType(
                name="combo", components=(BalloonComponent("native"),),
                dra=BalloonTypeDra(publish=True),
            ),
            "composite",
        ),
        (BalloonType(name="never", max_cpus=-1, dra=BalloonTypeDra(publish=True)), "maxCPUs < 0"),
        (BalloonType(name="half", dra=BalloonTypeDra(group_by="socket")), "only with publish"),
    ],
)  # fmt: skip
def test_unknown_combinations_are_refused_at_load(bt: BalloonType, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        validate_spec(dra_balloons_spec(bt, NATIVE))


async def test_reconfigure_keeps_claims_and_refuses_dropping_their_type(tmp_path: Path) -> None:
    node = balloons_node(tmp_path)
    assert await prepare(node, UID, "fast-numa3", 2) == ""
    held = claim_balloons(node)[UID].cpus
    wider = attrs.evolve(NATIVE, max_cpus=6)
    await node.manager.reconfigure(dra_balloons_spec(FAST, WIDE, wider))
    assert claim_balloons(node)[UID].cpus == held
    unpublished = attrs.evolve(FAST, dra=None)
    with pytest.raises(ConfigError, match=f"claim {UID}: device fast-numa3 is no balloon"):
        await node.manager.reconfigure(dra_balloons_spec(unpublished, WIDE, NATIVE))
    assert claim_balloons(node)[UID].cpus == held


@pytest.mark.parametrize("composite", [False, True])
def test_a_restored_claim_takes_its_cpus_from_an_empty_native_balloon(
    tmp_path: Path, composite: bool
) -> None:
    """At a restart the minBalloons balloons a fresh start makes may sit on a recorded claim's
    CPUs: they give them up and are refitted elsewhere (components of a composite too)."""
    native = attrs.evolve(NATIVE, min_balloons=1, min_cpus=2)
    parts = (BalloonComponent("native"), BalloonComponent("fast"))
    combo = BalloonType(name="combo", min_balloons=1, min_cpus=2, components=parts)
    types = (FAST, native, combo) if composite else (FAST, native)
    policy = balloons_node(tmp_path, dra_balloons_spec(*types)).policy
    [empty] = [b for b in policy.state.balloons if b.type.name == types[-1].name]
    cpu, size = min(empty.cpus), len(empty.cpus)
    device = f"fast-numa{cpu // 4}"
    grant = ClaimGrant(UID, "default", CpuSet([cpu]), "k" * 32, f"x/cpu={UID}", grouped=True,
                       devices=(device,))  # fmt: skip
    policy.claim_cpus(grant)
    state = policy.state
    seen = CpuSet()
    for b in state.balloons:
        assert b.cpus.isdisjoint(seen), b.name
        seen = seen | b.cpus
    assert claim_balloons_of(policy)[UID].cpus == CpuSet([cpu])
    assert len(empty.cpus) == size and cpu not in empty.cpus  # refitted elsewhere


def claim_balloons_of(policy: BalloonsPolicy) -> dict[str, Balloon]:
    return {b.claim: b for b in policy.state.balloons if b.claim}
