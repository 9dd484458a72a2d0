"""A stand-in kubelet: grpcio (not grpclib) stubs generated from our protos at test time.

grpcio is blocking, and the plugin's asyncio loop runs in trio's thread, so every call goes
through ``trio.to_thread`` (the client is a real, separate peer on its own thread).
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import grpc
import trio

PROTO_DIR = Path(__file__).resolve().parents[2] / "proto"
PROTOS = (
    "kubelet/pluginregistration/v1/api.proto",
    "kubelet/dra/v1/api.proto",
    "kubelet/dra/v1beta1/api.proto",
)
# Far above anything a test needs: a hang shows up as DEADLINE_EXCEEDED, not a stuck suite.
CALL_TIMEOUT = 30.0


@attrs.frozen
class ApiModules:
    pb2: ModuleType
    grpc: ModuleType


@attrs.frozen
class KubeletStubs:
    registration: ApiModules
    dra: dict[str, ApiModules]


def generate_grpcio_stubs(out: Path) -> KubeletStubs:
    cmd = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{PROTO_DIR}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        *PROTOS,
    ]
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(cmd, check=True, capture_output=True)
    sys.path.insert(0, str(out))

    def load(package: str) -> ApiModules:
        return ApiModules(
            importlib.import_module(f"{package}.api_pb2"),
            importlib.import_module(f"{package}.api_pb2_grpc"),
        )

    return KubeletStubs(
        registration=load("kubelet.pluginregistration.v1"),
        dra={v: load(f"kubelet.dra.{v}") for v in ("v1", "v1beta1")},
    )


class Kubelet:
    """Calls a plugin the way kubelet does, from a worker thread."""

    def __init__(self, stubs: KubeletStubs) -> None:
        self.stubs = stubs
        self._channels: list[grpc.Channel] = []

    def channel(self, socket: Path | str) -> grpc.Channel:
        channel = grpc.insecure_channel(f"unix:{socket}")
        self._channels.append(channel)
        return channel

    def close(self) -> None:
        for channel in self._channels:
            channel.close()

    async def get_info(self, reg_socket: Path) -> Any:
        reg = self.stubs.registration
        stub = reg.grpc.RegistrationStub(self.channel(reg_socket))
        return await _in_thread(stub.GetInfo, reg.pb2.InfoRequest())

    async def notify(self, reg_socket: Path, registered: bool, error: str = "") -> Any:
        reg = self.stubs.registration
        stub = reg.grpc.RegistrationStub(self.channel(reg_socket))
        request = reg.pb2.RegistrationStatus(plugin_registered=registered, error=error)
        return await _in_thread(stub.NotifyRegistrationStatus, request)

    def dra_stub(self, version: str, channel: grpc.Channel) -> Any:
        return self.stubs.dra[version].grpc.DRAPluginStub(channel)

    def claims(self, version: str, *uids: str) -> list[Any]:
        pb2 = self.stubs.dra[version].pb2
        return [pb2.Claim(namespace="default", name=f"claim-{u}", uid=u) for u in uids]

    async def prepare(self, version: str, channel: grpc.Channel, *uids: str) -> Any:
        pb2 = self.stubs.dra[version].pb2
        request = pb2.NodePrepareResourcesRequest(claims=self.claims(version, *uids))
        return await _in_thread(self.dra_stub(version, channel).NodePrepareResources, request)

    async def unprepare(self, version: str, channel: grpc.Channel, *uids: str) -> Any:
        pb2 = self.stubs.dra[version].pb2
        request = pb2.NodeUnprepareResourcesRequest(claims=self.claims(version, *uids))
        return await _in_thread(self.dra_stub(version, channel).NodeUnprepareResources, request)


async def _in_thread(method: Any, request: Any) -> Any:
    return await trio.to_thread.run_sync(
        lambda: method(request, timeout=CALL_TIMEOUT, wait_for_ready=False)
    )
