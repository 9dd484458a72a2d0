"""A container is bound to a claim only if the runtime says so: its CDI device where the
runtime reports CDI devices (containerd >= 2.3), else the claim's key that only its CDI spec
injects; and always a pod of the claim's namespace. Anything a pod spec can write itself is
logged once and ignored (issue 33 item 3)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from nri_resmgr.cpuset import CpuSet
from tests.dra.claim_setup import DRIVER, Node, claim_key, claim_object, make_node, with_claim_env
from tests.policies.workload import besteffort, guaranteed

UID = "0b6f1c2e-9d4a-4e57-8a3b-2c1d5e6f7a80"
CLAIMED = CpuSet([6, 7])
CDI_ID = f"{DRIVER}/cpu=claim-{UID}"


async def prepared(tmp_path: Path) -> Node:
    node = make_node(tmp_path)
    node.claims.add(claim_object(UID, ["cpu6", "cpu7"]))
    [outcome] = (await node.preparer.prepare([node.ref(UID)])).values()
    assert outcome.error == ""
    return node


def cpus_of(node: Node, cid: str) -> CpuSet:
    return CpuSet.parse(node.runtime.cpus[cid] or "")


async def test_a_pod_in_another_namespace_setting_the_claims_variable_gets_none_of_its_cpus(
    tmp_path: Path,
) -> None:
    """The attack the issue measured: a Guaranteed 1-CPU pod elsewhere names the claim with
    its true cpuset. Even with the claim's key (stolen), another namespace is refused."""
    node = await prepared(tmp_path)
    pod, c = guaranteed("thief", 1000, namespace="attacker")
    guessed = node.runtime.create((pod, with_claim_env(c, UID, "6-7")))
    pod2, c2 = guaranteed("thief-with-key", 1000, namespace="attacker")
    stolen = node.runtime.create((pod2, node.injected(c2, UID)))

    for cid in (guessed.id, stolen.id):
        got = cpus_of(node, cid)
        assert got.isdisjoint(CLAIMED)
        assert len(got) == 1  # placed as the native Guaranteed 1-CPU container it is
    assert node.policy.claims.bound == {}


async def test_the_claims_variable_without_the_claims_key_is_ignored(tmp_path: Path) -> None:
    node = await prepared(tmp_path)
    pod, c = besteffort("no-key")
    no_key = node.runtime.create((pod, with_claim_env(c, UID, "6-7")))
    pod2, c2 = besteffort("wrong-key")
    wrong = node.runtime.create((pod2, with_claim_env(c2, UID, "6-7", key="0" * 32)))
    pod3, c3 = besteffort("owner")
    owner = node.runtime.create((pod3, node.injected(c3, UID)))

    assert cpus_of(node, no_key.id).isdisjoint(CLAIMED)
    assert cpus_of(node, wrong.id).isdisjoint(CLAIMED)
    assert cpus_of(node, owner.id) == CLAIMED
    assert node.policy.claims.bound == {owner.id: (UID,)}


async def test_a_runtime_that_reports_cdi_devices_decides_by_the_claims_device(
    tmp_path: Path,
) -> None:
    node = await prepared(tmp_path)
    # The runtime lists the claim's device: bound (a container whose env lost the key too).
    pod, c = besteffort("listed")
    listed_c = node.injected(c, UID, cdi_devices=["vendor.com/gpu=0", CDI_ID])
    listed_c = with_claim_env(listed_c, UID, "6-7", key="")
    listed = node.runtime.create((pod, listed_c))
    # The runtime lists devices, not the claim's: refused, even with the env and key right.
    pod2, c2 = besteffort("not-listed")
    not_listed = node.runtime.create(
        (pod2, node.injected(c2, UID, cdi_devices=["vendor.com/gpu=0"]))
    )

    assert cpus_of(node, listed.id) == CLAIMED
    assert cpus_of(node, not_listed.id).isdisjoint(CLAIMED)
    assert node.policy.claims.bound == {listed.id: (UID,)}


async def test_a_forged_variable_is_logged_once_per_container(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    node = await prepared(tmp_path)
    pod, c = besteffort("forger", namespace="attacker")
    forger = node.runtime.create((pod, with_claim_env(c, UID, "6-7")))
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            pods, containers = node.runtime.reported()
            node.runtime.apply(node.manager.synchronize(pods, containers))
    refusals = [r.getMessage() for r in caplog.records if UID in r.getMessage()]
    assert len(refusals) == 1, refusals
    assert "namespace 'attacker', the claim in 'default'" in refusals[0]
    assert cpus_of(node, forger.id).isdisjoint(CLAIMED)


async def test_the_claims_key_is_random_not_made_from_uid_or_cpus(tmp_path: Path) -> None:
    """The same claim UID prepared again on the same CPUs gets a new key."""
    node = await prepared(tmp_path)
    first = claim_key(node.cdi_dir, UID)
    await node.preparer.unprepare([node.ref(UID)])
    await node.preparer.prepare([node.ref(UID)])
    second = claim_key(node.cdi_dir, UID)
    assert first != second
    for key in (first, second):
        assert UID.replace("-", "") not in key and len(key) == 32


async def test_the_key_survives_a_daemon_restart_and_binds_the_running_container(
    tmp_path: Path,
) -> None:
    node = await prepared(tmp_path)
    key = claim_key(node.cdi_dir, UID)
    pod, c = besteffort("owner")
    owner = node.runtime.create((pod, node.injected(c, UID)))
    again = node.restart()
    pods, containers = again.runtime.reported()
    again.runtime.apply(again.manager.synchronize(pods, containers))
    assert claim_key(again.cdi_dir, UID) == key
    assert cpus_of(again, owner.id) == CLAIMED
    assert again.policy.claims.bound == {owner.id: (UID,)}


async def test_a_record_from_before_claim_keys_gets_a_key_and_a_rewritten_spec(
    tmp_path: Path,
) -> None:
    node = await prepared(tmp_path)
    state_file = node.state_dir / "dra-claims.json"
    state = json.loads(state_file.read_text())
    del state["claims"][UID]["key"]
    state_file.write_text(json.dumps(state))

    again = node.restart()

    key = again.driver.store.records[UID].key
    assert len(key) == 32
    assert json.loads(state_file.read_text())["claims"][UID]["key"] == key
    assert claim_key(again.cdi_dir, UID) == key
    assert again.policy.claims.cpus() == {UID: CLAIMED}


async def test_a_state_file_with_a_malformed_key_is_refused(tmp_path: Path) -> None:
    node = await prepared(tmp_path)
    state_file = node.state_dir / "dra-claims.json"
    state = json.loads(state_file.read_text())
    state["claims"][UID]["key"] = "x\nFOO=bar"
    state_file.write_text(json.dumps(state))

    again = node.restart()

    assert again.driver.store.broken is not None
    assert "key is not 32 hex digits" in again.driver.store.broken
