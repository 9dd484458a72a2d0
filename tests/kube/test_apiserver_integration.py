"""KubeClient against a real kube-apiserver + etcd (built from their Go modules on first use)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from nri_resmgr.backoff import Backoff
from nri_resmgr.errors import Recoverable
from nri_resmgr.kube import (
    AlreadyExists,
    Conflict,
    EventType,
    Forbidden,
    Invalid,
    KubeClient,
    NotFound,
    PatchType,
    TlsVerifyFailed,
    Unavailable,
    Watch,
    WatchEvent,
    load_in_cluster,
)
from nri_resmgr.kube.resources import (
    CONFIG_MAPS,
    CUSTOM_RESOURCE_DEFINITIONS,
    NAMESPACES,
    NODES,
    TOPOLOGY_AWARE_POLICIES,
)
from tests.kube.apiserver import ADMIN_TOKEN, VIEWER_TOKEN, ApiServer

pytestmark = pytest.mark.integration


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def client(apiserver: ApiServer) -> AsyncIterator[KubeClient]:
    async with KubeClient(apiserver.config()) as kube:
        yield kube


@pytest.fixture
async def namespace(client: KubeClient) -> str:
    name = unique("t")
    await client.create(NAMESPACES, {"metadata": {"name": name}})
    return name


async def test_node_crud_patches_and_conflicts(client: KubeClient) -> None:
    name = unique("node")
    created = await client.create(NODES, {"metadata": {"name": name, "labels": {"a": "1"}}})
    assert created["metadata"]["uid"]
    with pytest.raises(AlreadyExists):
        await client.create(NODES, {"metadata": {"name": name}})
    merged = await client.patch(NODES, name, {"metadata": {"labels": {"config.nri/group": "g1"}}})
    assert merged["metadata"]["labels"] == {"a": "1", "config.nri/group": "g1"}
    jsonp = await client.patch(
        NODES, name, [{"op": "remove", "path": "/metadata/labels/a"}], patch_type=PatchType.JSON
    )
    assert jsonp["metadata"]["labels"] == {"config.nri/group": "g1"}
    stale = created | {"metadata": created["metadata"] | {"labels": {"b": "2"}}}
    with pytest.raises(Conflict):
        await client.replace(NODES, stale)
    fresh = await client.get(NODES, name)
    fresh["metadata"]["labels"] = {"b": "2"}
    replaced = await client.replace(NODES, fresh)
    assert replaced["metadata"]["labels"] == {"b": "2"}
    await client.delete(NODES, name)
    with pytest.raises(NotFound):
        await client.get(NODES, name)


async def test_configmaps_and_selectors(client: KubeClient, namespace: str) -> None:
    for name, tier in (("one", "a"), ("two", "b"), ("three", "a")):
        cm = {"metadata": {"name": name, "labels": {"tier": tier}}, "data": {"k": name}}
        await client.create(CONFIG_MAPS, cm, namespace)
    by_name = await client.list(CONFIG_MAPS, namespace, field_selector="metadata.name=two")
    assert [i["data"]["k"] for i in by_name.items] == ["two"]
    by_label = await client.list(CONFIG_MAPS, namespace, label_selector="tier=a")
    assert sorted(i["metadata"]["name"] for i in by_label.items) == ["one", "three"]
    assert int(by_label.resource_version) > 0
    with pytest.raises(Invalid, match="Bad_Name"):
        await client.create(CONFIG_MAPS, {"metadata": {"name": "Bad_Name"}}, namespace)
    await client.delete(CONFIG_MAPS, "one", namespace)
    left = await client.list(CONFIG_MAPS, namespace, label_selector="tier")
    assert sorted(i["metadata"]["name"] for i in left.items) == ["three", "two"]


async def test_client_certificate_authenticates(apiserver: ApiServer) -> None:
    async with KubeClient(apiserver.client_cert_config()) as kube:
        assert (await kube.list(NODES)).resource_version


async def test_rbac_denial_is_forbidden(apiserver: ApiServer) -> None:
    async with KubeClient(apiserver.viewer_config()) as viewer:
        with pytest.raises(Forbidden, match="viewer"):
            await viewer.list(NODES)


TAP_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "topologyawarepolicies.config.nri"},
    "spec": {
        "group": "config.nri",
        "scope": "Namespaced",
        "names": {"kind": "TopologyAwarePolicy", "plural": "topologyawarepolicies",
                  "singular": "topologyawarepolicy", "listKind": "TopologyAwarePolicyList"},
        "versions": [{
            "name": "v1alpha1", "served": True, "storage": True,
            "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            }}},
        }],
    },
}  # fmt: skip


async def ensure_tap_crd(client: KubeClient) -> None:
    with contextlib.suppress(AlreadyExists):  # another test already applied it
        await client.create(CUSTOM_RESOURCE_DEFINITIONS, TAP_CRD)
    with trio.fail_after(60):
        while True:
            crd = await client.get(CUSTOM_RESOURCE_DEFINITIONS, TAP_CRD["metadata"]["name"])
            conditions = (crd.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return
            await trio.sleep(0.1)


async def test_custom_resource_status_merge_patch(client: KubeClient, namespace: str) -> None:
    await ensure_tap_crd(client)
    cr = {
        "apiVersion": "config.nri/v1alpha1",
        "kind": "TopologyAwarePolicy",
        "metadata": {"name": "default"},
        "spec": {"reservedResources": {"cpu": "750m"}},
    }
    created = await client.create(TOPOLOGY_AWARE_POLICIES, cr, namespace)
    entry = {"status": "Success", "generation": created["metadata"]["generation"],
             "errors": "", "timestamp": "2026-12-02T00:00:00Z"}  # fmt: skip
    patch = {"status": {"nodes": {"n1": entry, "n2": entry}}, "spec": {"ignored": True}}
    patched = await client.patch(
        TOPOLOGY_AWARE_POLICIES, "default", patch, namespace, subresource="status"
    )
    assert patched["status"]["nodes"]["n1"] == entry
    assert "ignored" not in patched["spec"]  # the status subresource leaves spec alone
    await client.patch(
        TOPOLOGY_AWARE_POLICIES, "default", {"status": {"nodes": {"n1": None}}}, namespace,
        subresource="status",
    )  # fmt: skip
    got = await client.get(TOPOLOGY_AWARE_POLICIES, "default", namespace)
    assert got["status"]["nodes"] == {"n2": entry}
    assert got["metadata"]["generation"] == created["metadata"]["generation"]


async def pump(watch: Watch, send: trio.MemorySendChannel[WatchEvent]) -> None:
    async with watch:
        async for event in watch:
            await send.send(event)


async def receive(events: trio.MemoryReceiveChannel[WatchEvent]) -> WatchEvent:
    with trio.fail_after(60):
        return await events.receive()


def value_in(event: WatchEvent) -> str:
    if event.type is EventType.RESET:
        (obj,) = event.objects
        return str(obj["data"]["v"])
    assert event.type is EventType.MODIFIED
    assert event.object is not None
    return str(event.object["data"]["v"])


async def wait_for_value(
    events: trio.MemoryReceiveChannel[WatchEvent], wanted: str, seen: list[tuple[str, str]]
) -> None:
    """Reads events until one shows ``wanted``; every event is recorded in ``seen``.

    A relist after a 410 may show the state from before ``wanted`` was written, so earlier
    values may appear first; a missed change never shows ``wanted`` and times out.
    """
    while True:
        event = await receive(events)
        seen.append((event.type.value, value_in(event)))
        if seen[-1][1] == wanted:
            return


async def test_watch_survives_apiserver_restart(
    apiserver: ApiServer, client: KubeClient, namespace: str
) -> None:
    name = "watched"
    await client.create(CONFIG_MAPS, {"metadata": {"name": name}, "data": {"v": "0"}}, namespace)
    await client.create(CONFIG_MAPS, {"metadata": {"name": "other"}}, namespace)
    watch = client.watch(
        CONFIG_MAPS, namespace, name=name, backoff=Backoff(initial=0.1, maximum=1.0)
    )
    send, events = trio.open_memory_channel[WatchEvent](100)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pump, watch, send)
        reset = await receive(events)
        assert reset.type is EventType.RESET
        assert [o["data"]["v"] for o in reset.objects] == ["0"]
        await client.patch(CONFIG_MAPS, name, {"data": {"v": "1"}}, namespace)
        seen: list[tuple[str, str]] = []
        await wait_for_value(events, "1", seen)
        assert seen == [("MODIFIED", "1")]

        async with apiserver.down():
            with trio.fail_after(60):
                while watch.reconnects < 2:  # it keeps trying while the server is down
                    await trio.sleep(0.05)
        # Changed while the watch may still be backing off: it must show up, as MODIFIED
        # from the kept resourceVersion or inside a RESET after a 410.
        await client.patch(CONFIG_MAPS, name, {"data": {"v": "2"}}, namespace)
        await client.patch(CONFIG_MAPS, "other", {"data": {"v": "x"}}, namespace)
        await wait_for_value(events, "2", seen)
        assert all(value in ("1", "2") for _, value in seen), seen
        await client.patch(CONFIG_MAPS, name, {"data": {"v": "3"}}, namespace)
        await wait_for_value(events, "3", seen)
        print("events across the restart:", seen, "reconnects:", watch.reconnects,
              "relists:", watch.relists)  # fmt: skip
        nursery.cancel_scope.cancel()


async def test_a_test_failing_while_the_server_is_down_leaves_it_running(
    apiserver: ApiServer, client: KubeClient
) -> None:
    class Failed(Exception):
        pass

    with pytest.raises(Failed):
        async with apiserver.down():
            with pytest.raises(Unavailable):  # refused: it is really down
                await client.get(NODES, "absent")
            raise Failed
    with pytest.raises(NotFound):  # answered again: the server is back for later tests
        await client.get(NODES, "absent")


async def test_in_cluster_config_with_rotating_token_file(
    apiserver: ApiServer, tmp_path: Path
) -> None:
    (tmp_path / "ca.crt").write_bytes((apiserver.workdir / "ca.crt").read_bytes())
    (tmp_path / "token").write_text(VIEWER_TOKEN)
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(apiserver.port)}
    config = load_in_cluster(env=env, service_account_dir=tmp_path)
    async with KubeClient(config) as kube:
        with pytest.raises(Forbidden):
            await kube.list(NODES)
        rotated = tmp_path / "token.new"
        rotated.write_text(ADMIN_TOKEN)
        rotated.replace(tmp_path / "token")
        assert (await kube.list(NODES)).resource_version


async def test_watch_custom_resource_and_node_by_name(client: KubeClient, namespace: str) -> None:
    await ensure_tap_crd(client)
    node = unique("node")
    await client.create(NODES, {"metadata": {"name": node}})
    cr_name = f"node.{node}"
    cr = {"apiVersion": "config.nri/v1alpha1", "kind": "TopologyAwarePolicy",
          "metadata": {"name": cr_name}, "spec": {}}  # fmt: skip
    send_cr, cr_events = trio.open_memory_channel[WatchEvent](100)
    send_node, node_events = trio.open_memory_channel[WatchEvent](100)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pump, client.watch(TOPOLOGY_AWARE_POLICIES, namespace, name=cr_name),
                           send_cr)  # fmt: skip
        nursery.start_soon(pump, client.watch(NODES, name=node), send_node)
        assert (await receive(cr_events)).objects == ()
        (listed_node,) = (await receive(node_events)).objects
        assert listed_node["metadata"]["name"] == node

        await client.create(TOPOLOGY_AWARE_POLICIES, cr, namespace)
        await client.patch(NODES, node, {"metadata": {"labels": {"config.nri/group": "g"}}})
        added, labelled = await receive(cr_events), await receive(node_events)
        assert (added.type, added.object and added.object["kind"]) == (
            EventType.ADDED, "TopologyAwarePolicy",
        )  # fmt: skip
        assert labelled.type is EventType.MODIFIED
        assert labelled.object and labelled.object["metadata"]["labels"] == {
            "config.nri/group": "g"
        }

        await client.delete(TOPOLOGY_AWARE_POLICIES, cr_name, namespace)
        deleted = await receive(cr_events)
        assert deleted.type is EventType.DELETED
        nursery.cancel_scope.cancel()


async def test_bookmarks_advance_an_idle_watch(client: KubeClient, namespace: str) -> None:
    busy = unique("busy")
    await client.create(NAMESPACES, {"metadata": {"name": busy}})
    # A short server-side timeout makes the API server send a bookmark before it ends the watch.
    watch = client.watch(CONFIG_MAPS, namespace, timeout_seconds=3)
    send, events = trio.open_memory_channel[WatchEvent](100)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pump, watch, send)
        reset = await receive(events)
        with trio.fail_after(60):
            i = 0
            while int(watch.resource_version or 0) <= int(reset.resource_version):
                await client.create(CONFIG_MAPS, {"metadata": {"name": f"c{i}"}}, busy)
                i += 1
                await trio.sleep(0.5)
        nursery.cancel_scope.cancel()
    with pytest.raises(trio.WouldBlock):
        events.receive_nowait()  # the bookmark itself is never handed out as an event


async def test_an_untrusted_server_certificate_names_its_cause_and_is_not_retried(
    apiserver: ApiServer,
) -> None:
    # No CA given: the system store does not know the test CA, so verification must fail.
    untrusted = attrs.evolve(apiserver.config(), ca_pem=None)
    async with KubeClient(untrusted) as kube:
        with pytest.raises(TlsVerifyFailed, match=r"certificate verify failed: .*issuer") as caught:
            await kube.list(NODES)
    assert not isinstance(caught.value, Recoverable)
