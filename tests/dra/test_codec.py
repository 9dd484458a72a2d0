"""The kubelet messages through betterproto and each way through Google's protobuf runtime
(grpcio-tools) to equal messages: v1's proto3 optional ``share_id``, maps of messages, empty
ones. (Protobuf's bytes differ in one valid way: it writes a map entry's empty message value,
``12 00``, where betterproto leaves it out; so the check is on parsed messages.)

A codec swap (e.g. ``betterproto-rust-codec``, which betterproto 2.0.0b7 installs
process-wide whenever it is importable) has to keep these passing."""

from __future__ import annotations

from typing import Any

import pytest

from nri_resmgr._gen.k8s.io.kubelet.pkg.apis.dra import v1, v1beta1
from nri_resmgr._gen.pluginregistration import (
    InfoRequest,
    PluginInfo,
    RegistrationStatus,
)
from tests.dra.kubelet_client import KubeletStubs


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
