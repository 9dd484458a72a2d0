"""The few CRI (``runtime.v1.RuntimeService``) calls the containerd lane times, from grpcio.

crictl is a process per call (tens of ms of spawn and dial around a call of a few ms), so the
lane speaks CRI itself, with the hand-declared messages of ``tests/cri_api.py``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import betterproto
import grpc

from tests.cri_api import (
    NETWORK_NODE,
    SERVICE,
    ContainerConfig,
    ContainerId,
    ContainerMetadata,
    CreateContainerRequest,
    IdReply,
    ImageSpec,
    LinuxContainerConfig,
    LinuxContainerResources,
    LinuxPodSandboxConfig,
    LinuxSandboxSecurityContext,
    NamespaceOption,
    PodSandboxConfig,
    PodSandboxMetadata,
    RunPodSandboxRequest,
)

__all__ = [
    "NETWORK_NODE",
    "ContainerConfig",
    "ContainerId",
    "ContainerMetadata",
    "CreateContainerRequest",
    "CriClient",
    "IdReply",
    "ImageSpec",
    "LinuxContainerConfig",
    "LinuxContainerResources",
    "LinuxPodSandboxConfig",
    "LinuxSandboxSecurityContext",
    "NamespaceOption",
    "PodSandboxConfig",
    "PodSandboxMetadata",
]


@dataclass
class CriClient:
    """Blocking CRI calls over containerd's unix socket; ``timed`` returns nanoseconds."""

    address: str
    channel: grpc.Channel = field(init=False)

    def __post_init__(self) -> None:
        self.channel = grpc.insecure_channel(f"unix://{self.address}")

    def close(self) -> None:
        self.channel.close()

    def call(self, method: str, request: betterproto.Message, timeout: float = 60) -> bytes:
        rpc = self.channel.unary_unary(SERVICE + method)
        reply: bytes = rpc(bytes(request), timeout=timeout)
        return reply

    def timed(self, method: str, request: betterproto.Message) -> tuple[bytes, int]:
        started = time.perf_counter_ns()
        reply = self.call(method, request)
        return reply, time.perf_counter_ns() - started

    def run_pod(self, config: PodSandboxConfig) -> str:
        return IdReply().parse(self.call("RunPodSandbox", RunPodSandboxRequest(config))).id

    def remove_pod(self, pod_id: str) -> None:
        self.call("StopPodSandbox", ContainerId(pod_id))
        self.call("RemovePodSandbox", ContainerId(pod_id))
