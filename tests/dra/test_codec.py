"""The kubelet messages through betterproto with ``betterproto-rust-codec`` (a dependency:
betterproto 2.0.0b7 swaps its ``Message.parse``/``__bytes__`` for the codec's when it can
import it): the same bytes as betterproto's own Python codec (run in a process where the
codec cannot be imported), and each way through Google's protobuf runtime (grpcio-tools)
to equal messages. Protobuf's bytes differ in one valid way: it writes a map entry's empty
message value (``12 00``) where betterproto, either codec, leaves it out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import betterproto
import pytest

from nri_resmgr._gen.k8s.io.kubelet.pkg.apis.dra import v1, v1beta1
from nri_resmgr._gen.pluginregistration import (
    InfoRequest,
    PluginInfo,
    RegistrationStatus,
)
from tests.dra.kubelet_client import KubeletStubs


def test_the_rust_codec_is_what_betterproto_uses() -> None:
    # If the wheel went missing, betterproto falls back silently to its Python codec.
    import betterproto_rust_codec  # noqa: F401

    assert betterproto.Message.__bytes__.__name__ == "__bytes_patch"
    assert betterproto.Message.parse.__name__ == "__parse_patch"


def _prepare_response(pb: Any, *, share_id: bool) -> Any:
    extra = {"share_id": "s-1"} if share_id else {}
    return pb.NodePrepareResourcesResponse(
        claims={
            "uid-a": pb.NodePrepareResourceResponse(
                devices=[
                    pb.Device(
                        request_names=["r1", "r2"],
                        pool_name="node-1",
                        device_name="cpu6",
                        cdi_device_ids=["topology-aware.nri.io/cpu=cpu6"],
                        **extra,
                    ),
                    pb.Device(pool_name="node-1", device_name="cpu7"),
                ]
            ),
            "uid-b": pb.NodePrepareResourceResponse(error="no such claim"),
            "uid-c": pb.NodePrepareResourceResponse(),
        }
    )


def _claims(pb: Any) -> list[Any]:
    return [
        pb.Claim(namespace="default", uid="uid-a", name="claim-a"),
        pb.Claim(uid="uid-b"),
    ]


def _cases(ours: Any, theirs: Any, version: str) -> list[tuple[Any, Any]]:
    cases = [
        (ours.NodePrepareResourcesRequest(claims=_claims(ours)),
         theirs.NodePrepareResourcesRequest(claims=_claims(theirs))),
        (ours.NodeUnprepareResourcesRequest(claims=_claims(ours)),
         theirs.NodeUnprepareResourcesRequest(claims=_claims(theirs))),
        (_prepare_response(ours, share_id=False), _prepare_response(theirs, share_id=False)),
        (ours.NodeUnprepareResourcesResponse(
            claims={"uid-a": ours.NodeUnprepareResourceResponse(),
                    "uid-b": ours.NodeUnprepareResourceResponse(error="busy")}),
         theirs.NodeUnprepareResourcesResponse(
            claims={"uid-a": theirs.NodeUnprepareResourceResponse(),
                    "uid-b": theirs.NodeUnprepareResourceResponse(error="busy")})),
        (ours.NodePrepareResourcesResponse(), theirs.NodePrepareResourcesResponse()),
    ]  # fmt: skip
    if version == "v1":  # proto3 optional: set (also to "") and unset are three encodings
        cases.append(
            (_prepare_response(ours, share_id=True), _prepare_response(theirs, share_id=True))
        )
        cases.append((ours.Device(share_id=""), theirs.Device(share_id="")))
    return cases


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_dra_messages_match_protobuf_both_ways(kubelet_stubs: KubeletStubs, version: str) -> None:
    ours = {"v1": v1, "v1beta1": v1beta1}[version]
    theirs = kubelet_stubs.dra[version].pb2
    for mine, reference in _cases(ours, theirs, version):
        _both_ways(mine, reference)


def _both_ways(mine: Any, reference: Any) -> None:
    wire = reference.SerializeToString(deterministic=True)
    assert type(mine)().parse(wire) == mine, type(mine).__name__
    assert theirs_parse(reference, bytes(mine)) == reference, type(mine).__name__


def theirs_parse(reference: Any, data: bytes) -> Any:
    parsed = type(reference)()
    parsed.ParseFromString(data)
    return parsed


def test_registration_messages_match_protobuf(kubelet_stubs: KubeletStubs) -> None:
    theirs = kubelet_stubs.registration.pb2
    info = dict(type="DRAPlugin", name="topology-aware.nri.io", endpoint="/var/lib/kubelet/x.sock",
                supported_versions=["v1.DRAPlugin", "v1beta1.DRAPlugin"])  # fmt: skip
    for mine, reference in [
        (PluginInfo(**info), theirs.PluginInfo(**info)),
        (
            RegistrationStatus(plugin_registered=True),
            theirs.RegistrationStatus(plugin_registered=True),
        ),
        (RegistrationStatus(error="bad"), theirs.RegistrationStatus(error="bad")),
        (InfoRequest(), theirs.InfoRequest()),
    ]:
        _both_ways(mine, reference)


def our_messages() -> dict[str, Any]:
    """Every case's message of ours, by a stable name (also run by the pure-Python side)."""
    out: dict[str, Any] = {}
    for version, ours in (("v1", v1), ("v1beta1", v1beta1)):
        for i, (mine, _) in enumerate(_cases(ours, ours, version)):
            out[f"{version}-{i}"] = mine
    return out


_PURE = """
import json, sys
sys.modules["betterproto_rust_codec"] = None  # import fails: betterproto keeps its own codec
import betterproto
from tests.dra.test_codec import our_messages
assert betterproto.Message.__bytes__.__name__ == "__bytes__"
print(json.dumps({name: bytes(m).hex() for name, m in our_messages().items()}))
"""


def test_same_bytes_as_betterprotos_python_codec() -> None:
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", _PURE], cwd=root, check=True, capture_output=True, text=True
    )
    pure = json.loads(out.stdout)
    mine = {name: bytes(m).hex() for name, m in our_messages().items()}
    assert mine == pure
    for name, m in our_messages().items():
        assert type(m)().parse(bytes.fromhex(pure[name])) == m, name
