"""CPU claims end to end inside the daemon: Prepare carves the CPUs out of the shared pools,
the claim's containers get exactly them, Unprepare gives them back; restarts lose nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.dra.cpu.cdi import CDI_VERSION
from nri_resmgr.errors import ConfigError
from nri_resmgr.nri import convert
from nri_resmgr.nri import wire as wire_codec
from nri_resmgr.resmgr.model import claim_key_name
from tests.dra.claim_setup import DRIVER, claim_object, env_line, make_node, with_claim_env
from tests.policies.workload import besteffort, guaranteed, topology_spec

UID = "0b6f1c2e-9d4a-4e57-8a3b-2c1d5e6f7a80"


def shared_of(node_cpus: dict[str, str | None], cid: str) -> CpuSet:
    return CpuSet.parse(node_cpus[cid] or "")


def test_one_device_per_allocatable_cpu_with_the_topology_attributes(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    devices = node.policy.dra_devices()
    # cpu0 is reserved (750m): every other CPU is a device, SMT siblings next to each other.
    assert [d.name for d in devices] == [f"cpu{i}" for i in range(1, 16)]
    cpu5 = next(d for d in devices if d.name == "cpu5")
    assert cpu5.cpus == (5,)
    assert cpu5.attributes == {
        "cpuID": 5,
        "coreID": 4,
        "socketID": 0,
        "dieID": 0,
        "numaNode": 1,
        "resource.kubernetes.io/numaNode": 1,
        "coreType": "standard",
        "isolated": False,
        "smtEnabled": True,
    }


async def test_prepare_carves_the_cpus_and_the_claim_container_gets_exactly_them(
    tmp_path: Path,
) -> None:
    node = make_node(tmp_path)
    be = node.runtime.create(besteffort("be"))
    before = shared_of(node.runtime.cpus, be.id)
    assert CpuSet([6, 7]).issubset(before)
    node.claims.add(claim_object(UID, ["cpu6", "cpu7"]))

    [outcome] = (await node.preparer.prepare([node.ref(UID)])).values()

    assert outcome.error == ""
    cdi_id = f"{DRIVER}/cpu=claim-{UID}"
    metadata_id = f"{DRIVER}/metadata={UID}_cpus"
    assert [(d.device.device, d.device.requests, d.cdi_ids) for d in outcome.devices] == [
        ("cpu6", ("cpus",), (cdi_id, metadata_id)),  # the request's metadata mount, once
        ("cpu7", ("cpus",), (cdi_id,)),
    ]
    # The shared container was moved off the claimed CPUs by an UpdateContainers.
    assert shared_of(node.runtime.cpus, be.id) == before - CpuSet([6, 7])
    # The CDI spec injects the env vars the policy recognises: the CPUs and the claim's key.
    spec = json.loads((node.cdi_dir / f"{DRIVER}-cpu_claim-{UID}.json").read_text())
    key = node.driver.store.records[UID].key
    assert re.fullmatch("[0-9a-f]{32}", key)
    assert spec == {
        "cdiVersion": CDI_VERSION,
        "kind": f"{DRIVER}/cpu",
        "devices": [
            {
                "name": f"claim-{UID}",
                "containerEdits": {"env": [env_line(UID, "6-7"), f"{claim_key_name(UID)}={key}"]},
            }
        ],
    }
    # The record is on disk before the answer.
    state = json.loads((node.state_dir / "dra-claims.json").read_text())
    assert state["claims"][UID]["cpus"] == "6-7"

    pod, c = besteffort("dra")
    claimed = node.runtime.create((pod, node.injected(c, UID)))
    other_pod, other = guaranteed("native", 2000)
    node.runtime.create((other_pod, other))
    assert node.runtime.cpus[claimed.id] == "6-7"
    assert CpuSet.parse(node.runtime.cpus[other.id] or "").isdisjoint(CpuSet([6, 7]))
    assert shared_of(node.runtime.cpus, be.id).isdisjoint(CpuSet([6, 7]))


async def test_the_claim_env_vars_travel_through_the_nri_conversion(tmp_path: Path) -> None:
    _pod, c = besteffort("dra")
    wire = convert.container_to_proto(with_claim_env(c, UID, "6-7", key="ab" * 16))
    assert env_line(UID, "6-7") in wire.env
    wire.env.append("PATH=/usr/bin")
    back = convert.container_from_proto(wire)
    assert (back.claims, back.claim_keys) == ({UID: "6-7"}, {UID: "ab" * 16})
    # The runtime's own parser (the fast path) reads them the same.
    fast = wire_codec.container(bytes(wire))
    assert (fast.claims, fast.claim_keys) == ({UID: "6-7"}, {UID: "ab" * 16})


async def test_a_forged_or_stale_claim_variable_is_ignored(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    node.claims.add(claim_object(UID, ["cpu6", "cpu7"]))
    await node.preparer.prepare([node.ref(UID)])
    pod, c = besteffort("forger")
    wrong_cpus = node.runtime.create((pod, with_claim_env(c, UID, "4-7")))
    pod2, c2 = besteffort("stranger")
    unknown = node.runtime.create((pod2, with_claim_env(c2, "not-prepared", "6-7")))
    for cid in (wrong_cpus.id, unknown.id):
        assert CpuSet.parse(node.runtime.cpus[cid] or "").isdisjoint(CpuSet([6, 7]))


async def test_prepare_is_idempotent(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    node.claims.add(claim_object(UID, ["cpu6", "cpu7"]))
    first = await node.preparer.prepare([node.ref(UID)])
    second = await node.preparer.prepare([node.ref(UID)])
    assert first == second
    assert node.policy.claims.cpus() == {UID: CpuSet([6, 7])}
    assert sorted(p.name for p in node.cdi_dir.iterdir()) == [
        f"{DRIVER}-cpu_claim-{UID}.json",
        f"{DRIVER}_metadata_{UID}_cpus.json",
    ]


async def test_unprepare_regrows_the_pools_and_removes_spec_and_record(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    be = node.runtime.create(besteffort("be"))
    before = shared_of(node.runtime.cpus, be.id)
    node.claims.add(claim_object(UID, ["cpu6", "cpu7"]))
    await node.preparer.prepare([node.ref(UID)])

    never = "0b6f1c2e-9d4a-4e57-8a3b-000000000000"
    outcomes = await node.preparer.unprepare([node.ref(UID), node.ref(never)])

    assert {uid: o.error for uid, o in outcomes.items()} == {UID: "", never: ""}
    assert shared_of(node.runtime.cpus, be.id) == before
    assert list(node.cdi_dir.iterdir()) == []
    state = json.loads((node.state_dir / "dra-claims.json").read_text())
    assert state["claims"] == {}
    assert node.policy.claims.cpus() == {}


async def test_a_restart_between_prepare_and_unprepare_loses_nothing(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    be = node.runtime.create(besteffort("be"))
    node.claims.add(claim_object(UID, ["cpu6", "cpu7"]))
    await node.preparer.prepare([node.ref(UID)])
    pod, c = besteffort("dra")
    claimed = node.runtime.create((pod, node.injected(c, UID)))

    again = node.restart()
    # Claims are back before Synchronize, so it finds the claim's container and keeps it.
    assert again.policy.claims.cpus() == {UID: CpuSet([6, 7])}
    pods, containers = again.runtime.reported()
    async with again.manager.lock:
        updates = again.manager.synchronize(pods, containers)
    again.runtime.apply(updates)
    assert again.runtime.cpus[claimed.id] == "6-7"
    assert shared_of(again.runtime.cpus, be.id).isdisjoint(CpuSet([6, 7]))
    # A native container created now stays off the claim too.
    native = again.runtime.create(guaranteed("native", 2000))
    assert CpuSet.parse(again.runtime.cpus[native.id] or "").isdisjoint(CpuSet([6, 7]))

    again.runtime.remove(claimed)
    outcomes = await again.preparer.unprepare([again.ref(UID)])
    assert outcomes[UID].error == ""
    assert CpuSet([6, 7]).issubset(shared_of(again.runtime.cpus, be.id))
    assert list(again.cdi_dir.iterdir()) == []


async def test_a_claim_restored_after_synchronize_moves_its_container_back(
    tmp_path: Path,
) -> None:
    """Prepare's records re-enter a policy that already synchronized (defensive order)."""
    node = make_node(tmp_path)
    node.claims.add(claim_object(UID, ["cpu6", "cpu7"]))
    await node.preparer.prepare([node.ref(UID)])
    pod, c = guaranteed("dra", 2000)
    claimed = node.runtime.create((pod, node.injected(c, UID)))
    fresh = make_node(tmp_path, tmp_path / "other-cdi", tmp_path / "other-state")
    fresh.runtime.pods, fresh.runtime.containers = node.runtime.pods, node.runtime.containers
    fresh.runtime.cpus, fresh.runtime.mems = node.runtime.cpus, node.runtime.mems
    pods, containers = fresh.runtime.reported()
    async with fresh.manager.lock:
        fresh.runtime.apply(fresh.manager.synchronize(pods, containers))

    await fresh.manager.claim_cpus(node.driver.grant(node.driver.store.records[UID]))

    assert fresh.runtime.cpus[claimed.id] == "6-7"
    assert fresh.policy.claims.bound == {claimed.id: (UID,)}


async def test_a_reconfiguration_keeps_claims_and_refuses_to_reserve_claimed_cpus(
    tmp_path: Path,
) -> None:
    node = make_node(tmp_path)
    be = node.runtime.create(besteffort("be"))
    node.claims.add(claim_object(UID, ["cpu6", "cpu7"]))
    await node.preparer.prepare([node.ref(UID)])
    pod, c = besteffort("dra")
    claimed = node.runtime.create((pod, node.injected(c, UID)))

    with pytest.raises(ConfigError, match="cpus 6 are claimed by prepared DRA claims"):
        await node.manager.reconfigure(topology_spec(reserved="cpuset:6"))
    assert node.policy.claims.cpus() == {UID: CpuSet([6, 7])}

    await node.manager.reconfigure(topology_spec(reserved="cpuset:0-1"))
    assert [d.name for d in node.policy.dra_devices()][:1] == ["cpu2"]
    assert node.runtime.cpus[claimed.id] == "6-7"
    assert shared_of(node.runtime.cpus, be.id).isdisjoint(CpuSet([0, 1, 6, 7]))
