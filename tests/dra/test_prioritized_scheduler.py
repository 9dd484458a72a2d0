"""Prioritized-list claims end to end (issue 33 item 5): the real kube-scheduler allocates a
``firstAvailable`` request, kubelet's own DRA code prepares it through our plugin.

topology-aware on the synthetic n4c16 machine (4 NUMA nodes of 4 CPUs, CPU 0 reserved), its
devices published by the daemon's publisher and CPU driver, served by the kubelet-plugin
layer on unix sockets that ``kubelet-dra-peer`` (kubelet's plugin manager and DRA manager,
k8s.io/kubernetes of the control plane's version) finds, registers and calls. Claims, each a
request ``cpus`` with sub-requests in order of preference:

- ``eight`` cannot fit (no NUMA node, or group, has 8 CPUs), so the scheduler falls back to
  ``four``: the result names ``cpus/four``;
- ``two`` fits at once: ``cpus/two``.

For each, kubelet's ``GetResources`` must give the CDI ids of our answer to the container
that lists the claim's request ``cpus`` (kubelet compares request names as they are; a
container can only name ``cpus``), and the CPUs claimed must be the ones the result names:
its devices (per-CPU mode) or its ``consumedCapacity`` inside its group (grouped mode). A
second request ``spare`` and a container listing it show the mapping is by request.

Per-CPU mode at kube-scheduler and kubelet v1.35.4 (DRAPrioritizedList is beta, on by default
since 1.34) and v1.37.2 (GA, locked on); grouped mode at v1.37.2 (consumable capacity is off in
1.35). ``nox -s scheduler`` runs both modes at v1.36.3 instead. The API server refuses a result
naming a sub-request the claim does not have; the plugin's own check of that is in
``test_prioritized_list.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from nri_resmgr.config.models import DraConfig
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.dra.kubeletplugin import KubeletPlugin
from nri_resmgr.dra.kubeletplugin.publisher import resource_slices
from nri_resmgr.kube import Invalid, KubeClient
from nri_resmgr.kube.resources import PODS, RESOURCE_CLAIMS
from tests.dra import chain
from tests.dra.claim_setup import DRIVER, NODE, Node, claim_cpus, make_node
from tests.dra.kubelet_peer import KubeletPeer, kubelet_peer, peer_binary
from tests.dra.scheduler import Scheduler, scheduler_stack, scheduler_versions
from tests.kube.apiserver import ApiServer
from tests.policies.workload import topology_spec

JSON = dict[str, Any]
NUMA = f"{DRIVER}/numaNode"
GROUPED = "8-15"  # NUMA nodes 2 and 3: two groups of 4 CPUs
GROUPS = {"numa2": CpuSet.parse("8-11"), "numa3": CpuSet.parse("12-15")}
SLICES = resource_slices("v1")


@attrs.frozen
class Stack:
    apiserver: ApiServer
    scheduler: Scheduler
    version: str


def cases(versions: tuple[str, ...]) -> list[tuple[str, str]]:
    """(version, mode): per-CPU devices everywhere, grouped ones where consumable capacity is
    on (1.36 and later)."""
    grouped_from = (1, 36)
    return [
        (version, mode)
        for version in versions
        for mode in ("individual", "grouped")
        if mode == "individual" or tuple(map(int, version[1:].split(".")[:2])) >= grouped_from
    ]


CASES = cases(scheduler_versions("v1.35.4", "v1.37.2"))
pytestmark = [
    pytest.mark.integration,
    pytest.mark.parametrize(("stack", "mode"), CASES, indirect=["stack"], scope="module"),
]


@pytest.fixture(scope="module")
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """kube-apiserver and kube-scheduler of one version, for the module."""
    version: str = request.param
    with scheduler_stack(tmp_path_factory, version, version) as (server, scheduler):
        yield Stack(server, scheduler, version)


@pytest.fixture(scope="module")
def kubelet_binary(stack: Stack) -> Path:
    """kubelet's DRA code of the control plane's version."""
    return peer_binary(stack.version)


@attrs.define
class Cluster:
    client: KubeClient
    ns: str
    node: Node
    kubelet: KubeletPeer
    stack: Stack
    grouped: bool


@pytest.fixture
async def cluster(
    aio_loop: object,  # grpclib's asyncio, under trio
    stack: Stack,
    mode: str,
    kubelet_binary: Path,
    tmp_path: Path,
    socket_dir: Path,
) -> AsyncIterator[Cluster]:
    grouped = mode == "grouped"
    dra = DraConfig(enabled=True)
    if grouped:
        dra = DraConfig(enabled=True, cpu_device_mode="grouped", grouped_cpus=GROUPED)
    node = make_node(tmp_path, spec=topology_spec(dra=dra))
    async with KubeClient(stack.apiserver.config()) as client:
        ns = f"prio-{uuid.uuid4().hex[:6]}"
        await chain.scaffold(client, ns, NODE, DRIVER)
        publisher = chain.publisher(client, node.driver.devices, DRIVER, NODE)
        plugin = KubeletPlugin(
            node.driver, DRIVER, client, socket_dir / "plugins", socket_dir / "registry",
            publisher=publisher, cdi_dir=node.cdi_dir,
        )  # fmt: skip
        peer = kubelet_peer(kubelet_binary, kubeconfig=stack.apiserver.kubeconfig, node=NODE,
                            registry=socket_dir / "registry", state=socket_dir / "kubelet",
                            log=tmp_path / "kubelet.log")  # fmt: skip
        (socket_dir / "registry").mkdir()
        async with peer as kubelet, trio.open_nursery() as nursery:
            await plugin.start(nursery)
            await kubelet.wait_plugin(DRIVER)
            await published(client, [d.name for d in await node.driver.devices()])
            yield Cluster(client, ns, node, kubelet, stack, grouped)
            await plugin.stop()
            nursery.cancel_scope.cancel()


async def published(client: KubeClient, names: list[str]) -> None:
    """Waits until the node's slice offers ``names`` (kubelet's start wipes the slices; the
    plugin publishes them again once registered)."""
    offered: list[str] = []
    try:
        with trio.fail_after(30):
            while True:
                found = await client.list(SLICES, field_selector=f"spec.nodeName={NODE}")
                offered = [d["name"] for s in found.items for d in s["spec"].get("devices") or []]
                if sorted(offered) == sorted(names):
                    return
                await trio.sleep(0.05)
    except trio.TooSlowError:
        pytest.fail(f"the node's slices offer {offered}, not {names}")


def sub_request(name: str, cpus: int, grouped: bool) -> JSON:
    """``cpus`` CPUs: that many per-CPU devices, or that much of one group's capacity."""
    if grouped:
        return {"name": name, "deviceClassName": DRIVER,
                "capacity": {"requests": {"cpu": str(cpus)}}}  # fmt: skip
    return {"name": name, "deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": cpus}


def prioritized_claim(
    name: str, subs: list[tuple[str, int]], grouped: bool, *, spare: bool = False
) -> JSON:
    """Request ``cpus``: the first of ``subs`` that fits, on one NUMA node (per-CPU devices
    need the constraint; a group is one node); with ``spare``, a request for one more CPU."""
    requests: list[JSON] = [
        {"name": "cpus", "firstAvailable": [sub_request(n, c, grouped) for n, c in subs]}
    ]
    if spare:
        requests.append({"name": "spare", "exactly": {"deviceClassName": DRIVER}})
    devices: JSON = {"requests": requests}
    if not grouped:
        devices["constraints"] = [{"requests": ["cpus"], "matchAttribute": NUMA}]
    return {"metadata": {"name": name}, "spec": {"devices": devices}}


def pod(name: str, claim: str) -> JSON:
    """``app`` lists the claim's request ``cpus``, ``spare`` its request ``spare``, ``all``
    the whole claim, ``none`` no claim."""

    def container(cname: str, claims: list[JSON]) -> JSON:
        return {"name": cname, "image": "pause", "resources": {"claims": claims}}

    return {
        "metadata": {"name": name},
        "spec": {
            "containers": [
                container("app", [{"name": "cpus", "request": "cpus"}]),
                container("spare", [{"name": "cpus", "request": "spare"}]),
                container("all", [{"name": "cpus"}]),
                container("none", []),
            ],
            "resourceClaims": [{"name": "cpus", "resourceClaimName": claim}],
        },
    }


async def schedule(c: Cluster, claim: JSON) -> tuple[JSON, JSON]:
    """Claim and pod created; (the allocated claim, the bound pod)."""
    name = claim["metadata"]["name"]
    await c.client.create(RESOURCE_CLAIMS, claim, c.ns)
    await c.client.create(PODS, pod(name, name), c.ns)
    try:
        allocated = await chain.allocated(c.client, c.ns, name)
        with trio.fail_after(30):
            while not (bound := await c.client.get(PODS, name, c.ns))["spec"].get("nodeName"):
                await trio.sleep(0.01)
    except trio.TooSlowError:
        pytest.fail(f"{name} not scheduled; scheduler log:\n{c.stack.scheduler.tail()}")
    return allocated, bound


def results(claim: JSON) -> list[JSON]:
    return list(claim["status"]["allocation"]["devices"]["results"])


def by_request(claim: JSON) -> dict[str, list[JSON]]:
    out: dict[str, list[JSON]] = {}
    for r in results(claim):
        out.setdefault(r["request"], []).append(r)
    return out


def expected_cdi(uid: str, *requests: str) -> list[str]:
    """What our answer gives a container of ``requests``: the claim's CDI device, and the
    device metadata mount of each request."""
    return sorted(
        [f"{DRIVER}/cpu=claim-{uid}"] + [f"{DRIVER}/metadata={uid}_{r}" for r in requests]
    )


async def prepare(c: Cluster, claim: JSON, bound: JSON) -> CpuSet:
    """kubelet prepares the pod: each container gets the CDI ids of the requests it lists
    (the device metadata mount of each, and the claim's device that injects its CPUs); the
    CPUs the claim holds, which are the ones its CDI spec pins the containers to."""
    uid = claim["metadata"]["uid"]
    requests = sorted({r["request"].split("/")[0] for r in results(claim)})
    prepared = await c.kubelet.prepare(bound)
    # Every device of the claim carries the claim's CDI id: kubelet lists it once per device.
    got = {name: sorted(set(ids)) for name, ids in prepared["cdi_devices"].items()}
    assert got["app"] == expected_cdi(uid, "cpus"), got
    assert got["spare"] == (expected_cdi(uid, "spare") if "spare" in requests else []), got
    assert got["all"] == expected_cdi(uid, *requests), got
    assert got["none"] == []
    held = c.node.policy.claims.cpus()[uid]
    assert claim_cpus(c.node.cdi_dir, uid) == held
    return held


async def release(c: Cluster, bound: JSON, name: str) -> None:
    await c.kubelet.unprepare(bound)
    assert c.node.policy.claims.cpus() == {}
    assert list(c.node.cdi_dir.glob("*")) == []  # claim spec and metadata mounts gone
    await chain.release(c.client, c.ns, name, name)


def device_cpus(results: list[JSON]) -> CpuSet:
    return CpuSet(int(r["device"].removeprefix("cpu")) for r in results)


def consumed(result: JSON) -> int:
    assert result.get("shareID"), result
    return int(result["consumedCapacity"]["cpu"])


async def test_the_scheduler_falls_back_to_the_sub_request_that_fits_and_kubelet_maps_it(
    cluster: Cluster,
) -> None:
    c = cluster
    claim = prioritized_claim("fallback", [("eight", 8), ("four", 4)], c.grouped)
    claim, bound = await schedule(c, claim)
    got = by_request(claim)
    assert list(got) == ["cpus/four"], results(claim)
    held = await prepare(c, claim, bound)
    if c.grouped:
        [result] = got["cpus/four"]
        assert consumed(result) == 4
        assert held == GROUPS[result["device"]]  # all 4 CPUs of the group it names
    else:
        # NUMA node 0 offers 3 CPUs (CPU 0 is reserved): node 1 is the first with 4.
        assert held == device_cpus(got["cpus/four"]) == CpuSet.parse("4-7")
    await release(c, bound, "fallback")


async def test_the_first_sub_request_is_taken_when_it_fits(cluster: Cluster) -> None:
    c = cluster
    claim = prioritized_claim("first", [("two", 2), ("one", 1)], c.grouped, spare=True)
    claim, bound = await schedule(c, claim)
    got = by_request(claim)
    assert sorted(got) == ["cpus/two", "spare"], results(claim)
    held = await prepare(c, claim, bound)
    if c.grouped:
        [two], [spare] = got["cpus/two"], got["spare"]
        assert (consumed(two), consumed(spare)) == (2, 1)
        # 2 CPUs of the group the first names and 1 of the group the second names.
        assert len(held) == 3 and len(held & GROUPS[two["device"]]) >= 2
        assert len(held & GROUPS[spare["device"]]) >= 1
        assert held.issubset(GROUPS[two["device"]] | GROUPS[spare["device"]])
    else:
        pair, one = device_cpus(got["cpus/two"]), device_cpus(got["spare"])
        assert len(pair) == 2 and len({cpu // 4 for cpu in pair}) == 1  # one NUMA node
        assert len(one) == 1 and held == pair | one
    # kubelet's PrepareResources again (a container restart): the claim stays as it was.
    assert await prepare(c, claim, bound) == held
    await release(c, bound, "first")


async def test_the_api_server_refuses_a_result_naming_a_sub_request_the_claim_lacks(
    cluster: Cluster,
) -> None:
    """What the plugin's own check (test_prioritized_list.py) defends against cannot come
    through the API server: it validates result request names against the claim."""
    c = cluster
    await c.client.create(RESOURCE_CLAIMS, prioritized_claim("odd", [("four", 4)], c.grouped), c.ns)
    obj = await c.client.get(RESOURCE_CLAIMS, "odd", c.ns)
    device = "numa2" if c.grouped else "cpu4"
    obj["status"] = {"allocation": {"devices": {"results": [
        {"request": "cpus/nine", "driver": DRIVER, "pool": NODE, "device": device}]}}}  # fmt: skip
    with pytest.raises(Invalid, match="must be the name of a request in the claim"):
        await c.client.replace(RESOURCE_CLAIMS, obj, c.ns, subresource="status")
    await c.client.delete(RESOURCE_CLAIMS, "odd", c.ns)
