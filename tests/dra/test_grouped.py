"""Grouped CPU devices (issue 33 item 1): one shared device per NUMA node (or socket) whose
capacity in CPUs claims consume; Prepare picks that many CPUs in the group; the grouped CPUs
are set apart so Prepare can always give what the scheduler allocated."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from nri_resmgr.config import notapplied
from nri_resmgr.config.models import DraConfig
from nri_resmgr.config.validate import validate_spec
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.dra.cpu.driver import slice_device
from nri_resmgr.dra.kubeletplugin.devices import Capacity, RequestPolicy
from nri_resmgr.dra.kubeletplugin.slice_spec import device_json
from nri_resmgr.errors import ConfigError
from tests.dra.claim_setup import Node, claim_object, make_node
from tests.policies.workload import balloons_spec, besteffort, guaranteed, topology_spec

UID = "0b6f1c2e-9d4a-4e57-8a3b-2c1d5e6f7a80"
OTHER = "0b6f1c2e-9d4a-4e57-8a3b-2c1d5e6f7a81"
GROUPED = CpuSet.parse("8-15")  # socket 1: NUMA nodes 2 (8-11) and 3 (12-15)


def grouped_spec(by: str | None = None, cpus: str = "8-15") -> Any:
    dra = DraConfig(enabled=True, cpu_device_mode="grouped", group_by=by, grouped_cpus=cpus)  # type: ignore[arg-type]
    return topology_spec(dra=dra)


def grouped_node(tmp_path: Path, by: str | None = None) -> Node:
    return make_node(tmp_path, spec=grouped_spec(by))


def claim(uid: str, device: str, consumed: Any, **kw: Any) -> dict[str, Any]:
    extra: dict[str, Any] = {} if consumed is None else {"consumedCapacity": {"cpu": consumed}}
    return claim_object(uid, [device], shareID=f"share-{uid[-2:]}", **extra, **kw)


def cpus_of(node: Node, cid: str) -> CpuSet:
    return CpuSet.parse(node.runtime.cpus[cid] or "")


def test_one_shared_device_per_numa_node_with_its_grouped_cpus_as_capacity(
    tmp_path: Path,
) -> None:
    devices = grouped_node(tmp_path).policy.dra_devices()
    assert [(d.name, d.cpus, d.capacity, d.shared) for d in devices] == [
        ("numa2", (8, 9, 10, 11), {"cpu": 4}, True),
        ("numa3", (12, 13, 14, 15), {"cpu": 4}, True),
    ]
    assert devices[0].attributes == {
        "numCPUs": 4,
        "smtEnabled": True,
        "numaNodeID": 2,
        "numaNode": 2,
        "resource.kubernetes.io/numaNode": 2,
        "socketID": 1,
    }
    # As the slice carries it: shared, whole CPUs, a request naming none consumes one.
    published = slice_device(devices[0])
    assert published.allow_multiple_allocations
    assert published.capacity == {"cpu": Capacity(4, RequestPolicy(minimum=1, step=1, default=1))}
    body = device_json(published, "v1")
    assert body["allowMultipleAllocations"] is True
    assert body["capacity"]["cpu"]["value"] == "4"


def test_a_group_of_one_cpu_is_published_without_a_step_the_api_server_refuses(
    tmp_path: Path,
) -> None:
    # kube-apiserver 1.37 refuses min 1 + step 1 above a capacity of 1 ("one step 2 is larger
    # than capacity value: 1"); without the step the one amount in range is still one CPU.
    node = make_node(tmp_path, spec=grouped_spec(cpus="8"))
    [device] = node.policy.dra_devices()
    body = device_json(slice_device(device), "v1")
    assert body["capacity"]["cpu"] == {
        "value": "1",
        "requestPolicy": {"default": "1", "validRange": {"min": "1"}},
    }
    wider = device_json(slice_device(grouped_node(tmp_path / "2").policy.dra_devices()[0]), "v1")
    assert wider["capacity"]["cpu"]["requestPolicy"]["validRange"] == {"min": "1", "step": "1"}


def test_group_by_socket_gives_one_device_per_socket(tmp_path: Path) -> None:
    devices = grouped_node(tmp_path, "socket").policy.dra_devices()
    assert [(d.name, d.capacity, d.attributes["socketID"]) for d in devices] == [
        ("socket1", {"cpu": 8}, 1)
    ]


def test_native_containers_never_run_on_the_grouped_cpus(tmp_path: Path) -> None:
    node = grouped_node(tmp_path)
    shared = node.runtime.create(besteffort("be"))
    natives = [node.runtime.create(guaranteed(f"g{i}", 2000)) for i in range(3)]
    for c in [shared, *natives]:
        assert cpus_of(node, c.id).isdisjoint(GROUPED), c.name
    # Native exclusive CPUs run out before any grouped one is used.
    assert len(cpus_of(node, shared.id)) == 1


async def test_prepare_picks_the_consumed_count_inside_the_group_smt_siblings_together(
    tmp_path: Path,
) -> None:
    node = grouped_node(tmp_path)
    node.claims.add(claim(UID, "numa3", "2"))
    [outcome] = (await node.preparer.prepare([node.ref(UID)])).values()
    assert outcome.error == ""
    record = node.driver.store.records[UID]
    assert record.grouped and len(record.cpus) == 2 and record.cpus.issubset(CpuSet.parse("12-15"))
    assert record.cpus in (CpuSet([12, 13]), CpuSet([14, 15]))  # one core
    [device] = outcome.devices
    assert (device.device.device, device.device.share_id) == ("numa3", "share-80")
    # The claim's container gets exactly them; a second claim gets the rest of the group.
    node.claims.add(claim(OTHER, "numa3", "2"))
    [second] = (await node.preparer.prepare([node.ref(OTHER)])).values()
    assert second.error == ""
    both = node.policy.claims.cpus()
    assert both[UID].isdisjoint(both[OTHER]) and both[UID] | both[OTHER] == CpuSet.parse("12-15")
    pod, c = besteffort("app")
    app = node.runtime.create((pod, node.injected(c, UID)))
    assert cpus_of(node, app.id) == record.cpus


async def test_a_prepared_grouped_claim_is_prepared_again_with_the_same_cpus(
    tmp_path: Path,
) -> None:
    node = grouped_node(tmp_path)
    node.claims.add(claim(UID, "numa2", "3"))
    first = await node.preparer.prepare([node.ref(UID)])
    cpus = node.driver.store.records[UID].cpus
    again = await node.preparer.prepare([node.ref(UID)])
    assert first == again and node.driver.store.records[UID].cpus == cpus
    restarted = node.restart()
    assert restarted.policy.claims.cpus() == {UID: cpus}


async def test_unprepare_gives_the_cpus_back_to_the_group_not_to_native_containers(
    tmp_path: Path,
) -> None:
    node = grouped_node(tmp_path)
    be = node.runtime.create(besteffort("be"))
    before = cpus_of(node, be.id)
    node.claims.add(claim(UID, "numa2", "4"))
    await node.preparer.prepare([node.ref(UID)])
    await node.preparer.unprepare([node.ref(UID)])
    assert node.policy.claims.cpus() == {}
    assert cpus_of(node, be.id) == before  # still off the grouped CPUs
    node.claims.add(claim(OTHER, "numa2", "4"))
    [outcome] = (await node.preparer.prepare([node.ref(OTHER)])).values()
    assert outcome.error == ""


BAD = [
    ("numa2", "5", "more than the group's 4 CPUs"),
    ("numa2", "0", "at least 1 CPU"),
    ("numa2", "1500m", "not a whole number of CPUs"),
    ("numa2", "lots", "not a quantity"),
    ("numa2", None, "no consumedCapacity 'cpu'"),
    ("numa0", "1", "unknown device(s) numa0"),  # a group this node does not offer
    ("cpu9", "1", "unknown device(s) cpu9"),  # a per-CPU device, not published in grouped mode
]


@pytest.mark.parametrize(("device", "consumed", "error"), BAD)
async def test_bad_grouped_allocations_fail_the_claim_and_write_nothing(
    tmp_path: Path, device: str, consumed: str | None, error: str
) -> None:
    node = grouped_node(tmp_path)
    node.claims.add(claim(UID, device, consumed))
    [outcome] = (await node.preparer.prepare([node.ref(UID)])).values()
    assert error in outcome.error
    assert node.policy.claims.cpus() == {}
    assert list(node.cdi_dir.glob("*")) == []
    assert (
        not (node.state_dir / "dra-claims.json").exists()
        or UID not in (node.state_dir / "dra-claims.json").read_text()
    )


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        ({"pool": "node-2"}, "not this node's pool"),
        ({"driver": "gpu.example.com"}, "no allocation result for driver"),
    ],
)
async def test_grouped_results_of_another_node_or_driver_fail_the_claim(
    tmp_path: Path, extra: dict[str, str], error: str
) -> None:
    node = grouped_node(tmp_path)
    node.claims.add(claim(UID, "numa2", "2", **extra))
    [outcome] = (await node.preparer.prepare([node.ref(UID)])).values()
    assert error in outcome.error
    assert node.policy.claims.cpus() == {} and list(node.cdi_dir.glob("*")) == []


async def test_a_claim_larger_than_the_groups_free_cpus_fails_cleanly(tmp_path: Path) -> None:
    """Only if something other than the scheduler's view got there first (here: a claim the
    test prepares beyond the capacity the scheduler would have allowed)."""
    node = grouped_node(tmp_path)
    node.claims.add(claim(UID, "numa2", "3"))
    await node.preparer.prepare([node.ref(UID)])
    node.claims.add(claim(OTHER, "numa2", "2"))
    [outcome] = (await node.preparer.prepare([node.ref(OTHER)])).values()
    assert "2 CPUs asked of a group with 1 free of 4" in outcome.error
    assert set(node.policy.claims.cpus()) == {UID}


async def test_a_per_cpu_record_read_by_grouped_mode_is_a_clear_claim_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    per_cpu = make_node(tmp_path, spec=topology_spec(dra=DraConfig(enabled=True)))
    per_cpu.claims.add(claim_object(UID, ["cpu9", "cpu10"]))
    await per_cpu.preparer.prepare([per_cpu.ref(UID)])

    with caplog.at_level(logging.ERROR):
        grouped = per_cpu.restart(grouped_spec())
    # Not re-claimed on the grouped CPUs (kept for unprepare), said at start.
    assert grouped.policy.claims.cpus() == {}
    assert "set apart for grouped claims" in caplog.text
    # Its Prepare (kubelet retrying) is refused by name; unprepare still succeeds.
    grouped.claims.add(claim(UID, "numa2", "2"))
    [outcome] = (await grouped.preparer.prepare([grouped.ref(UID)])).values()
    assert "was prepared from per-CPU devices" in outcome.error
    [done] = (await grouped.preparer.unprepare([grouped.ref(UID)])).values()
    assert done.error == ""


async def test_a_grouped_record_read_by_per_cpu_mode_is_a_clear_claim_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    node = grouped_node(tmp_path)
    node.claims.add(claim(UID, "numa2", "2"))
    await node.preparer.prepare([node.ref(UID)])
    with caplog.at_level(logging.ERROR):
        per_cpu = node.restart(topology_spec(dra=DraConfig(enabled=True)))
    assert per_cpu.policy.claims.cpus() == {}
    assert "prepared from grouped devices" in caplog.text
    state = json.loads((node.state_dir / "dra-claims.json").read_text())
    assert state["claims"][UID]["grouped"] is True  # kept for unprepare


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        (balloons_spec(dra=DraConfig(enabled=True, cpu_device_mode="grouped", grouped_cpus="4")),
         "grouped CPU devices are offered by topology-aware only"),
        (topology_spec(dra=DraConfig(enabled=True, group_by="socket")),
         "spec.dra.groupBy: applies only with cpuDeviceMode grouped"),
        (topology_spec(dra=DraConfig(enabled=True, cpu_device_mode="grouped")),
         "spec.dra.groupedCPUs: required with cpuDeviceMode grouped"),
        (grouped_spec(cpus="8-x"), "spec.dra.groupedCPUs: invalid cpuset"),
    ],
)  # fmt: skip
def test_grouped_mode_keys_are_checked_at_load(spec: Any, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        validate_spec(spec)


def test_grouped_cpus_must_be_offered_and_leave_native_cpus(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cpus 0 are reserved or not allowed"):
        make_node(tmp_path, spec=grouped_spec(cpus="0-3"))
    with pytest.raises(ConfigError, match="leaves no CPU for native containers"):
        make_node(tmp_path, spec=grouped_spec(cpus="1-15"))


async def test_grouped_mode_cannot_change_on_a_running_daemon(tmp_path: Path) -> None:
    node = grouped_node(tmp_path)
    with pytest.raises(ConfigError, match="restart nri-resmgr"):
        await node.manager.reconfigure(grouped_spec(cpus="12-15"))
    with pytest.raises(ConfigError, match="restart nri-resmgr"):
        await node.manager.reconfigure(topology_spec(dra=DraConfig(enabled=True)))
    assert [d.name for d in node.policy.dra_devices()] == ["numa2", "numa3"]


def test_grouped_keys_with_dra_off_are_said_to_be_not_applied(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(notapplied, "_reported", set())
    dra = DraConfig(enabled=False, cpu_device_mode="grouped", grouped_cpus="8-15")
    with caplog.at_level(logging.WARNING):
        node = make_node(tmp_path, spec=topology_spec(dra=dra))
    said = "spec.dra.cpuDeviceMode: accepted, not applied: spec.dra.enabled is false"
    assert caplog.text.count(said) == 1
    assert node.policy.claims.grouped == CpuSet()


def test_a_restart_into_grouped_mode_moves_native_containers_off_the_grouped_cpus(
    tmp_path: Path,
) -> None:
    per_cpu = make_node(tmp_path, spec=topology_spec(dra=DraConfig(enabled=True)))
    natives = [per_cpu.runtime.create(guaranteed(f"g{i}", 2000)) for i in range(3)]
    shared = per_cpu.runtime.create(besteffort("be"))
    before = CpuSet.union_all(cpus_of(per_cpu, c.id) for c in natives)
    assert not before.isdisjoint(GROUPED)  # some ran where the grouped CPUs will be

    grouped = per_cpu.restart(grouped_spec())
    pods, containers = grouped.runtime.reported()
    grouped.runtime.apply(grouped.manager.synchronize(pods, containers))

    for c in [*natives, shared]:
        got = cpus_of(grouped, c.id)
        assert got and got.isdisjoint(GROUPED), (c.name, got)
    assert [len(cpus_of(grouped, c.id)) for c in natives] == [2, 2, 2]
