"""Prioritized-list claims (``firstAvailable``), fast: a result naming ``<request>/<sub>``.

kubelet maps a prepared device to the containers whose ``resources.claims[].request`` is one
of the device's request names, compared as they are; a container can only name ``<request>``.
So the answer must say ``cpus`` for a result of ``cpus/four``, over both API versions, in
per-CPU and grouped mode, while the CPUs claimed are the ones the result names. A result
naming a request the claim does not have is a per-claim error with nothing claimed. The same
against the real kube-scheduler and kubelet's own DRA code: ``test_prioritized_scheduler.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from nri_resmgr.config.models import DraConfig
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.dra.kubeletplugin import KubeletPlugin
from tests.dra.claim_setup import DRIVER, Node, claim_object, make_node
from tests.dra.kubelet_client import Kubelet
from tests.dra.test_claim_bad_input import assert_nothing_left
from tests.policies.workload import besteffort, topology_spec

UID = "11111111-2222-3333-4444-555555555555"
JSON = dict[str, Any]


def prioritized(uid: str, results: list[JSON], subs: tuple[str, ...] = ("eight", "four")) -> JSON:
    """Claim ``uid`` with request ``cpus`` = firstAvailable ``subs`` and a plain request
    ``spare``, allocated ``results`` ((request, device) pairs or full result dicts)."""
    obj = claim_object(uid, [])
    obj["spec"]["devices"]["requests"] = [
        {"name": "cpus", "firstAvailable": [{"name": s, "deviceClassName": DRIVER} for s in subs]},
        {"name": "spare", "exactly": {"deviceClassName": DRIVER}},
    ]
    obj["status"]["allocation"]["devices"]["results"] = [
        {"driver": DRIVER, "pool": "node-1"} | r for r in results
    ]
    return obj


def per_cpu(request: str, *devices: str) -> list[JSON]:
    return [{"request": request, "device": d} for d in devices]


@attrs.frozen
class Served:
    node: Node
    plugin: KubeletPlugin

    async def prepare(self, kubelet: Kubelet, version: str = "v1") -> Any:
        """kubelet's NodePrepareResources of claim ``UID``; its answer for the claim."""
        answer = await kubelet.prepare(version, kubelet.channel(self.plugin.dra_socket), UID)
        return answer.claims[UID]


@pytest.fixture
async def served(
    aio_loop: object, socket_dir: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Served]:
    """The node's CPU driver behind the real kubelet-plugin layer (gRPC on unix sockets);
    parametrized indirectly with a DraConfig for grouped mode."""
    dra = getattr(request, "param", None) or DraConfig(enabled=True)
    node = make_node(tmp_path, spec=topology_spec(dra=dra))
    plugin = KubeletPlugin(
        node.driver, DRIVER, node.claims,  # type: ignore[arg-type]
        socket_dir / "plugins", socket_dir / "registry", cdi_dir=node.cdi_dir,
    )  # fmt: skip
    async with trio.open_nursery() as nursery:
        await plugin.start(nursery)
        yield Served(node, plugin)
        await plugin.stop()


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
async def test_a_sub_request_result_is_answered_with_the_request_containers_name(
    served: Served, kubelet: Kubelet, version: str
) -> None:
    node = served.node
    node.claims.add(prioritized(UID, per_cpu("cpus/four", *(f"cpu{c}" for c in range(4, 8)))
                                + per_cpu("spare", "cpu1")))  # fmt: skip
    claim = await served.prepare(kubelet, version)
    assert claim.error == ""
    names = {d.device_name: list(d.request_names) for d in claim.devices}
    assert names == {"cpu4": ["cpus"], "cpu5": ["cpus"], "cpu6": ["cpus"], "cpu7": ["cpus"],
                     "cpu1": ["spare"]}  # fmt: skip
    claim_cdi = f"{DRIVER}/cpu=claim-{UID}"
    assert all(claim_cdi in d.cdi_device_ids for d in claim.devices)
    # One device metadata mount per base request, on its first device.
    metadata = sorted(i for d in claim.devices for i in d.cdi_device_ids if i != claim_cdi)
    assert metadata == [f"{DRIVER}/metadata={UID}_cpus", f"{DRIVER}/metadata={UID}_spare"]
    assert node.policy.claims.cpus() == {UID: CpuSet.parse("1,4-7")}
    # The record keeps the result's own name (a second Prepare compares allocations).
    record = node.driver.store.records[UID]
    assert {r.request for r in record.results} == {"cpus/four", "spare"}


GROUPED = DraConfig(enabled=True, cpu_device_mode="grouped", grouped_cpus="8-15")


@pytest.mark.parametrize("served", [GROUPED], indirect=True, ids=["grouped"])
async def test_a_grouped_sub_request_consumes_what_its_result_says(
    served: Served, kubelet: Kubelet
) -> None:
    node = served.node
    small = {"request": "cpus/four", "device": "numa3", "shareID": "share-1",
             "consumedCapacity": {"cpu": "3"}}  # fmt: skip
    node.claims.add(prioritized(UID, [small]))
    claim = await served.prepare(kubelet)
    assert claim.error == ""
    [device] = claim.devices
    assert (device.device_name, list(device.request_names)) == ("numa3", ["cpus"])
    assert device.share_id == "share-1"
    cpus = node.policy.claims.cpus()[UID]
    assert len(cpus) == 3 and cpus.issubset(CpuSet.parse("12-15"))


@pytest.mark.parametrize("served", [GROUPED], indirect=True, ids=["grouped"])
async def test_one_group_serving_two_requests_answers_each_with_its_own_share(
    served: Served, kubelet: Kubelet
) -> None:
    node = served.node
    two = {"request": "cpus/four", "device": "numa3", "shareID": "share-1",
           "consumedCapacity": {"cpu": "2"}}  # fmt: skip
    spare = {"request": "spare", "device": "numa3", "shareID": "share-2",
             "consumedCapacity": {"cpu": "1"}}  # fmt: skip
    node.claims.add(prioritized(UID, [two, spare]))
    claim = await served.prepare(kubelet)
    assert claim.error == ""
    answered = [(d.device_name, list(d.request_names), d.share_id) for d in claim.devices]
    assert answered == [("numa3", ["cpus"], "share-1"), ("numa3", ["spare"], "share-2")]
    cpus = node.policy.claims.cpus()[UID]
    assert len(cpus) == 3 and cpus.issubset(CpuSet.parse("12-15"))


BAD_REQUESTS = [
    (
        "cpus/huge",
        "names request 'cpus/huge', which the claim does not have (its requests: "
        "cpus/eight, cpus/four, spare)",
    ),
    ("spare/one", "names request 'spare/one'"),  # a plain request has no sub-requests
    ("cpus/", "names request 'cpus/'"),
    ("gpus", "names request 'gpus'"),
    ("", "names request ''"),
]


@pytest.mark.parametrize(("request_name", "error"), BAD_REQUESTS)
async def test_a_result_naming_a_request_the_claim_lacks_fails_alone_leaving_nothing(
    tmp_path: Path, request_name: str, error: str
) -> None:
    node = make_node(tmp_path)
    node.runtime.create(besteffort("be"))
    before = dict(node.runtime.cpus)
    good = "22222222-2222-3333-4444-555555555555"
    node.claims.add(prioritized(UID, per_cpu("cpus/four", "cpu4") + per_cpu(request_name, "cpu5")))
    [alone] = (await node.preparer.prepare([node.ref(UID)])).values()
    assert error in alone.error and alone.devices == ()
    assert f"claim default/claim-{UID} ({UID}): the allocation result for device cpu5" in (
        alone.error
    )
    assert_nothing_left(node, before)
    # Beside another claim of the pod: that one is prepared as usual.
    node.claims.add(prioritized(good, per_cpu("cpus/eight", "cpu8")))
    outcomes = await node.preparer.prepare([node.ref(UID), node.ref(good)])
    assert outcomes[UID] == alone and outcomes[good].error == ""
    assert node.policy.claims.cpus() == {good: CpuSet([8])}


@pytest.mark.parametrize("served", [GROUPED], indirect=True, ids=["grouped"])
async def test_a_grouped_result_naming_an_unknown_sub_request_claims_nothing(
    served: Served, kubelet: Kubelet
) -> None:
    node = served.node
    bad = {"request": "cpus/nine", "device": "numa3", "consumedCapacity": {"cpu": "1"}}
    node.claims.add(prioritized(UID, [bad]))
    claim = await served.prepare(kubelet)
    assert "names request 'cpus/nine', which the claim does not have" in claim.error
    assert list(claim.devices) == []
    assert node.policy.claims.cpus() == {} and list(node.cdi_dir.glob("*")) == []
