"""The few CRI (``runtime.v1.RuntimeService``) calls the containerd lane times, from grpcio.

crictl is a process per call (tens of ms of spawn and dial around a call of a few ms), so the
lane speaks CRI itself. Only the messages and fields it sends are declared here, by hand,
with the field numbers of k8s.io/cri-api's ``runtime/v1`` API; every other field is left at
its default, which is what protobuf sends for an unset field anyway.
"""

from __future__ import annotations

# ruff: noqa: RUF009  (betterproto fields are descriptors built by a call, as in _gen/)
import time
from dataclasses import dataclass, field

import betterproto
import grpc

SERVICE = "/runtime.v1.RuntimeService/"
NETWORK_NODE = 2  # NamespaceMode.NODE: host network, there is no CNI on the bench machine


@dataclass(eq=False, repr=False)
class PodSandboxMetadata(betterproto.Message):
    name: str = betterproto.string_field(1)
    uid: str = betterproto.string_field(2)
    namespace: str = betterproto.string_field(3)
    attempt: int = betterproto.uint32_field(4)


@dataclass(eq=False, repr=False)
class NamespaceOption(betterproto.Message):
    network: int = betterproto.int32_field(1)


@dataclass(eq=False, repr=False)
class LinuxSandboxSecurityContext(betterproto.Message):
    namespace_options: NamespaceOption = betterproto.message_field(1)


@dataclass(eq=False, repr=False)
class LinuxPodSandboxConfig(betterproto.Message):
    cgroup_parent: str = betterproto.string_field(1)
    security_context: LinuxSandboxSecurityContext = betterproto.message_field(2)


@dataclass(eq=False, repr=False)
class PodSandboxConfig(betterproto.Message):
    metadata: PodSandboxMetadata = betterproto.message_field(1)
    log_directory: str = betterproto.string_field(3)
    linux: LinuxPodSandboxConfig = betterproto.message_field(8)


@dataclass(eq=False, repr=False)
class ContainerMetadata(betterproto.Message):
    name: str = betterproto.string_field(1)
    attempt: int = betterproto.uint32_field(2)


@dataclass(eq=False, repr=False)
class ImageSpec(betterproto.Message):
    image: str = betterproto.string_field(1)


@dataclass(eq=False, repr=False)
class LinuxContainerResources(betterproto.Message):
    cpu_period: int = betterproto.int64_field(1)
    cpu_quota: int = betterproto.int64_field(2)
    cpu_shares: int = betterproto.int64_field(3)
    memory_limit_in_bytes: int = betterproto.int64_field(4)


@dataclass(eq=False, repr=False)
class LinuxContainerConfig(betterproto.Message):
    resources: LinuxContainerResources = betterproto.message_field(1)


@dataclass(eq=False, repr=False)
class ContainerConfig(betterproto.Message):
    metadata: ContainerMetadata = betterproto.message_field(1)
    image: ImageSpec = betterproto.message_field(2)
    command: list[str] = betterproto.string_field(3)
    log_path: str = betterproto.string_field(11)
    linux: LinuxContainerConfig = betterproto.message_field(15)


@dataclass(eq=False, repr=False)
class RunPodSandboxRequest(betterproto.Message):
    config: PodSandboxConfig = betterproto.message_field(1)


@dataclass(eq=False, repr=False)
class CreateContainerRequest(betterproto.Message):
    pod_sandbox_id: str = betterproto.string_field(1)
    config: ContainerConfig = betterproto.message_field(2)
    sandbox_config: PodSandboxConfig = betterproto.message_field(3)


@dataclass(eq=False, repr=False)
class IdReply(betterproto.Message):
    """RunPodSandboxResponse (``pod_sandbox_id = 1``) and CreateContainerResponse
    (``container_id = 1``): one string in field 1."""

    id: str = betterproto.string_field(1)


@dataclass(eq=False, repr=False)
class ContainerId(betterproto.Message):
    """StartContainerRequest, RemoveContainerRequest; with ``timeout`` StopContainerRequest.
    StopPodSandbox/RemovePodSandbox requests have the sandbox id in the same field."""

    id: str = betterproto.string_field(1)
    timeout: int = betterproto.int64_field(2)


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
