"""Messages decoded by betterproto are checked for framing first, as the hand codec does."""

from __future__ import annotations

import pytest

from nri_resmgr._gen import ttrpc as envelope
from nri_resmgr._gen.nri.pkg.api import v1alpha1 as api
from nri_resmgr.nri import framing, wire
from nri_resmgr.nri.errors import RpcError
from nri_resmgr.nri.ttrpc import unary

CONFIGURE = bytes(api.ConfigureRequest(runtime_name="containerd", nri_version="v0.12.2"))
UPDATE = bytes(
    api.UpdateContainerRequest(
        container=api.Container(id="c1", labels={"a": "b"}),
        linux_resources=api.LinuxResources(cpu=api.LinuxCpu(cpus="0-3")),
    )
)


@pytest.mark.parametrize("payload", [CONFIGURE, UPDATE])
@pytest.mark.parametrize("cut", [1, 2, 3])
def test_truncated_payloads_are_refused(payload: bytes, cut: int) -> None:
    cls = api.ConfigureRequest if payload is CONFIGURE else api.UpdateContainerRequest
    framing.check(payload, cls)  # whole: fine
    with pytest.raises(wire.WireError):
        framing.check(payload[:-cut], cls)


def test_a_sub_message_with_broken_framing_is_refused() -> None:
    # A LinuxResources whose inner LinuxCpu announces more bytes than it holds; the outer
    # lengths are consistent, so only a check that descends finds it.
    cpu = b"\x0a\x05ab"  # LinuxCpu: field 1, 5 bytes announced, 2 present
    resources = b"\x12" + bytes([len(cpu)]) + cpu  # LinuxResources.cpu (field 2)
    update = b"\x1a" + bytes([len(resources)]) + resources  # UpdateContainerRequest field 3
    with pytest.raises(wire.WireError, match="announced"):
        framing.check(update, api.UpdateContainerRequest)


async def test_a_truncated_configure_is_an_error_reply_not_a_shortened_request() -> None:
    seen: list[api.ConfigureRequest] = []

    async def configure(req: api.ConfigureRequest) -> api.ConfigureResponse:
        seen.append(req)
        return api.ConfigureResponse()

    handler = unary(api.ConfigureRequest, configure)
    await handler(CONFIGURE)
    with pytest.raises(RpcError, match="cannot decode ConfigureRequest"):
        await handler(CONFIGURE[:-3])
    assert [r.nri_version for r in seen] == ["v0.12.2"]


def test_a_truncated_response_envelope_is_refused() -> None:
    response = bytes(envelope.Response(payload=b"x" * 40))
    framing.check(response, envelope.Response)
    with pytest.raises(wire.WireError):
        framing.check(response[:-5], envelope.Response)
