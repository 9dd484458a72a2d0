"""The kubelet plugin sockets refuse oversized messages before reading them (issue 34 item 8):
grpclib itself reads whatever length a message announces, up to 4 GiB."""

from __future__ import annotations

import grpc
import pytest

from nri_resmgr.dra.kubeletplugin.grpclib_private import MAX_RECEIVE_MESSAGE
from tests.dra.conftest import RunningPlugin
from tests.dra.kubelet_client import Kubelet, _in_thread


def oversized(kubelet: Kubelet, version: str, size: int) -> object:
    pb2 = kubelet.stubs.dra[version].pb2
    claim = pb2.Claim(namespace="default", name="x" * size, uid="big")
    return pb2.NodePrepareResourcesRequest(claims=[claim])


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
async def test_a_request_over_the_limit_is_refused_and_the_socket_keeps_serving(
    running_plugin: RunningPlugin, kubelet: Kubelet, version: str
) -> None:
    channel = kubelet.channel(running_plugin.dra_socket)
    stub = kubelet.dra_stub(version, channel)
    with pytest.raises(grpc.RpcError) as refused:
        await _in_thread(stub.NodePrepareResources, oversized(kubelet, version, 5 << 20))
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert f"exceeds the limit of {MAX_RECEIVE_MESSAGE}" in str(refused.value.details())
    # A message at the limit's size class still goes through, on the same and a new channel.
    just_under = oversized(kubelet, version, MAX_RECEIVE_MESSAGE - 1024)
    answer = await _in_thread(stub.NodePrepareResources, just_under)
    assert set(answer.claims) == {"big"}
    fresh = kubelet.channel(running_plugin.dra_socket)
    assert set((await kubelet.prepare(version, fresh, "uid-a")).claims) == {"uid-a"}


async def test_the_registration_socket_has_the_same_limit(
    running_plugin: RunningPlugin, kubelet: Kubelet
) -> None:
    reg = kubelet.stubs.registration
    stub = reg.grpc.RegistrationStub(kubelet.channel(running_plugin.reg_socket))
    request = reg.pb2.RegistrationStatus(plugin_registered=False, error="e" * (5 << 20))
    with pytest.raises(grpc.RpcError) as refused:
        await _in_thread(stub.NotifyRegistrationStatus, request)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert running_plugin.plugin.registrar.status is None  # never reached the handler


def request_of_size(kubelet: Kubelet, version: str, size: int) -> object:
    """A NodePrepareResourcesRequest whose encoding is exactly ``size`` bytes."""
    for name_length in range(size - 100, size):
        request = oversized(kubelet, version, name_length)
        if request.ByteSize() == size:  # type: ignore[attr-defined]
            return request
    raise AssertionError(f"no request encodes to {size} bytes")


async def test_the_limit_is_inclusive_as_grpcs(
    running_plugin: RunningPlugin, kubelet: Kubelet
) -> None:
    stub = kubelet.dra_stub("v1", kubelet.channel(running_plugin.dra_socket))
    at_limit = request_of_size(kubelet, "v1", MAX_RECEIVE_MESSAGE)
    assert set((await _in_thread(stub.NodePrepareResources, at_limit)).claims) == {"big"}
    over = request_of_size(kubelet, "v1", MAX_RECEIVE_MESSAGE + 1)
    with pytest.raises(grpc.RpcError) as refused:
        await _in_thread(stub.NodePrepareResources, over)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
