"""KubeClient against the in-process fake: paths, bodies, error mapping, token rotation."""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_resmgr.errors import Recoverable
from nri_resmgr.kube import (
    AlreadyExists,
    ApiError,
    BadRequest,
    ClusterConfig,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    KubeClient,
    NotFound,
    PatchType,
    Unauthorized,
    Unavailable,
)
from nri_resmgr.kube.auth import TokenFile
from nri_resmgr.kube.resources import CONFIG_MAPS, NODES, TOPOLOGY_AWARE_POLICIES
from tests.kube.conftest import ServeFake
from tests.kube.fakeserver import FakeServer, Reply, Request, echo, status_reply


@pytest.mark.parametrize(
    ("code", "reason", "error", "recoverable"),
    [
        (400, "BadRequest", BadRequest, False),
        (401, "Unauthorized", Unauthorized, True),
        (403, "Forbidden", Forbidden, False),
        (404, "NotFound", NotFound, False),
        (409, "AlreadyExists", AlreadyExists, False),
        (409, "Conflict", Conflict, True),
        (410, "Expired", Gone, True),
        (422, "Invalid", Invalid, False),
        (429, "TooManyRequests", Unavailable, True),
        (500, "InternalError", Unavailable, True),
        (503, "ServiceUnavailable", Unavailable, True),
        (418, "Teapot", ApiError, False),
    ],
)
async def test_status_replies_map_to_typed_errors(
    serve_fake: ServeFake, code: int, reason: str, error: type[ApiError], recoverable: bool
) -> None:
    async def handler(req: Request) -> Reply:
        return status_reply(code, reason, f"told {code}")

    _, client = await serve_fake(handler)
    with pytest.raises(ApiError) as caught:
        await client.get(NODES, "n1")
    assert type(caught.value) is error
    assert (caught.value.status, caught.value.reason) == (code, reason)
    assert caught.value.message == f"told {code}"
    assert isinstance(caught.value, Recoverable) is recoverable


async def test_non_status_error_body_keeps_text(serve_fake: ServeFake) -> None:
    async def handler(req: Request) -> Reply:
        return Reply(502, "proxy says no")

    _, client = await serve_fake(handler)
    with pytest.raises(Unavailable, match="proxy says no"):
        await client.get(NODES, "n1")


async def test_refused_connection_is_unavailable() -> None:
    from tests.kube.apiserver import free_port

    client = KubeClient(ClusterConfig(server=f"http://127.0.0.1:{free_port()}"))
    async with client:
        with pytest.raises(Unavailable) as caught:
            await client.get(NODES, "n1")
    assert caught.value.status == 0


async def test_crud_paths_methods_and_bodies(serve_fake: ServeFake) -> None:
    server, client = await serve_fake(echo)
    cm = {"metadata": {"name": "cm1", "namespace": "ns1"}, "data": {"a": "1"}}
    await client.create(CONFIG_MAPS, cm)
    await client.get(NODES, "node-1")
    await client.replace(CONFIG_MAPS, cm)
    await client.patch(
        TOPOLOGY_AWARE_POLICIES, "default", {"status": {"x": 1}}, "kube-system",
        subresource="status",
    )  # fmt: skip
    await client.patch(
        NODES, "node-1", [{"op": "add", "path": "/metadata/labels/a", "value": "b"}],
        patch_type=PatchType.JSON,
    )  # fmt: skip
    await client.delete(CONFIG_MAPS, "cm1", "ns1", resource_version="42")
    got = [(r.method, r.path) for r in server.requests]
    assert got == [
        ("POST", "/api/v1/namespaces/ns1/configmaps"),
        ("GET", "/api/v1/nodes/node-1"),
        ("PUT", "/api/v1/namespaces/ns1/configmaps/cm1"),
        ("PATCH", "/apis/config.nri/v1alpha1/namespaces/kube-system"
                  "/topologyawarepolicies/default/status"),
        ("PATCH", "/api/v1/nodes/node-1"),
        ("DELETE", "/api/v1/namespaces/ns1/configmaps/cm1"),
    ]  # fmt: skip
    types = [r.headers.get("content-type") for r in server.requests]
    assert types[3] == "application/merge-patch+json"
    assert types[4] == "application/json-patch+json"
    assert server.requests[0].json() == cm
    assert server.requests[5].json()["preconditions"] == {"resourceVersion": "42"}
    assert all(r.headers["authorization"] == "Bearer secret" for r in server.requests)


async def test_bad_arguments_are_named_before_sending(serve_fake: ServeFake) -> None:
    server, client = await serve_fake(echo)
    with pytest.raises(ValueError, match="namespaced"):
        await client.get(CONFIG_MAPS, "cm1")
    with pytest.raises(ValueError, match="cluster-scoped"):
        await client.list(NODES, "ns1")
    with pytest.raises(ValueError, match="JSON patch is a list"):
        await client.patch(NODES, "n", {"a": 1}, patch_type=PatchType.JSON)
    with pytest.raises(ValueError, match="server-side apply needs a field_manager"):
        await client.patch(NODES, "n", {"a": 1}, patch_type=PatchType.APPLY)
    with pytest.raises(ValueError, match="invalid name"):
        await client.get(NODES, "a/b")
    assert server.requests == []


async def test_server_side_apply_names_its_manager_and_may_force(serve_fake: ServeFake) -> None:
    server, client = await serve_fake(echo)
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}
    await client.patch(NODES, "n", body, patch_type=PatchType.APPLY, field_manager="me")
    await client.patch(NODES, "n", body, patch_type=PatchType.APPLY, field_manager="me",
                       force=True)  # fmt: skip
    await client.patch(NODES, "n", {"metadata": {}})
    first, forced, merge = server.requests
    assert first.headers["content-type"] == "application/apply-patch+yaml"
    assert first.query == {"fieldManager": "me"}
    assert forced.query == {"fieldManager": "me", "force": "true"}
    assert merge.query == {}
    assert first.json() == body


async def test_list_follows_continue_and_fills_kind(serve_fake: ServeFake) -> None:
    async def handler(req: Request) -> Reply:
        if req.query.get("continue") == "page2":
            return Reply(body={"metadata": {"resourceVersion": "9"},
                               "items": [{"metadata": {"name": "b"}}]})  # fmt: skip
        return Reply(body={"metadata": {"resourceVersion": "8", "continue": "page2"},
                           "items": [{"metadata": {"name": "a"}}]})  # fmt: skip

    server, client = await serve_fake(handler)
    listed = await client.list(NODES, label_selector="x=y", field_selector="metadata.name!=c")
    assert [i["metadata"]["name"] for i in listed.items] == ["a", "b"]
    assert {i["kind"] for i in listed.items} == {"Node"}
    assert listed.resource_version == "9"
    assert server.requests[1].query["labelSelector"] == "x=y"
    assert server.requests[1].query["fieldSelector"] == "metadata.name!=c"


async def test_token_file_is_reread_when_rotated(tmp_path: Path, serve_fake: ServeFake) -> None:
    token_path = tmp_path / "token"
    token_path.write_text("first\n")
    server, client = await _client_with_token_file(serve_fake, token_path, accept={"first", "2nd"})
    await client.get(NODES, "n")
    new = tmp_path / "token.new"
    new.write_text("2nd")
    new.replace(token_path)  # the kubelet swaps files atomically, like this
    await client.get(NODES, "n")
    assert [r.headers["authorization"] for r in server.requests] == ["Bearer first", "Bearer 2nd"]


async def test_unauthorized_rereads_token_once_and_retries(
    tmp_path: Path, serve_fake: ServeFake
) -> None:
    token_path = tmp_path / "token"
    token_path.write_text("old")
    server, client = await _client_with_token_file(serve_fake, token_path, accept={"new"})
    source = client.config.token
    assert isinstance(source, TokenFile)
    source.current()
    token_path.write_text("new")
    # Same size and a coarse mtime can hide the change from the stat check; the 401 path
    # must still pick the new token up.
    source._stamp = source._stat()
    await client.get(NODES, "n")
    assert [r.headers["authorization"] for r in server.requests] == ["Bearer old", "Bearer new"]
    token_path.write_text("refused")
    with pytest.raises(Unauthorized):
        await client.get(NODES, "n")
    assert server.requests[-1].headers["authorization"] == "Bearer refused"
    assert len(server.requests) == 3  # an unchanged token is not retried


async def _client_with_token_file(
    serve_fake: ServeFake, token_path: Path, accept: set[str]
) -> tuple[FakeServer, KubeClient]:
    async def handler(req: Request) -> Reply:
        if req.headers.get("authorization", "").removeprefix("Bearer ") in accept:
            return Reply(body={"metadata": {"name": "n"}})
        return status_reply(401, "Unauthorized")

    return await serve_fake(handler, TokenFile(token_path))


async def test_a_huge_error_message_is_kept_short(serve_fake: ServeFake) -> None:
    async def handler(req: Request) -> Reply:
        return status_reply(422, "Invalid", "spec.x: Invalid value: " + "v" * 600_000)

    _, client = await serve_fake(handler)
    with pytest.raises(Invalid) as caught:
        await client.get(NODES, "n1")
    assert len(str(caught.value)) < 1_000
    assert "600023 characters" in str(caught.value)
