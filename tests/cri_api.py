"""The CRI (``runtime.v1.RuntimeService``) messages the tests send and read, declared by hand
as betterproto messages with the field numbers of k8s.io/cri-api's ``runtime/v1/api.proto``.
Only the fields used are declared; protobuf sends nothing for an unset field anyway.

Transport-free on purpose: the bench's containerd lane sends them with grpcio, the node
guest's agent (``tests/node/guest_cri.py``, which imports this file as ``cri_api``) with
grpclib. It imports nothing of the project or of the tests.
"""

from __future__ import annotations

# ruff: noqa: RUF009  (betterproto fields are descriptors built by a call, as in _gen/)
from dataclasses import dataclass

import betterproto

STR = betterproto.TYPE_STRING

SERVICE = "/runtime.v1.RuntimeService/"
NETWORK_NODE = 2  # NamespaceMode.NODE: the host's network namespace, no CNI


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
class LinuxContainerResources(betterproto.Message):
    cpu_period: int = betterproto.int64_field(1)
    cpu_quota: int = betterproto.int64_field(2)
    cpu_shares: int = betterproto.int64_field(3)
    memory_limit_in_bytes: int = betterproto.int64_field(4)
    oom_score_adj: int = betterproto.int64_field(5)


@dataclass(eq=False, repr=False)
class LinuxPodSandboxConfig(betterproto.Message):
    cgroup_parent: str = betterproto.string_field(1)
    security_context: LinuxSandboxSecurityContext = betterproto.message_field(2)
    resources: LinuxContainerResources = betterproto.message_field(5)


@dataclass(eq=False, repr=False)
class PodSandboxConfig(betterproto.Message):
    metadata: PodSandboxMetadata = betterproto.message_field(1)
    log_directory: str = betterproto.string_field(3)
    labels: dict[str, str] = betterproto.map_field(6, STR, STR)
    annotations: dict[str, str] = betterproto.map_field(7, STR, STR)
    linux: LinuxPodSandboxConfig = betterproto.message_field(8)


@dataclass(eq=False, repr=False)
class ContainerMetadata(betterproto.Message):
    name: str = betterproto.string_field(1)
    attempt: int = betterproto.uint32_field(2)


@dataclass(eq=False, repr=False)
class ImageSpec(betterproto.Message):
    image: str = betterproto.string_field(1)


@dataclass(eq=False, repr=False)
class LinuxContainerConfig(betterproto.Message):
    resources: LinuxContainerResources = betterproto.message_field(1)


@dataclass(eq=False, repr=False)
class ContainerConfig(betterproto.Message):
    metadata: ContainerMetadata = betterproto.message_field(1)
    image: ImageSpec = betterproto.message_field(2)
    command: list[str] = betterproto.string_field(3)
    labels: dict[str, str] = betterproto.map_field(9, STR, STR)
    annotations: dict[str, str] = betterproto.map_field(10, STR, STR)
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


@dataclass(eq=False, repr=False)
class Empty(betterproto.Message):
    """Every reply whose fields the tests do not read."""


@dataclass(eq=False, repr=False)
class ContainerStatusRequest(betterproto.Message):
    container_id: str = betterproto.string_field(1)
    verbose: bool = betterproto.bool_field(2)


@dataclass(eq=False, repr=False)
class ContainerStatus(betterproto.Message):
    id: str = betterproto.string_field(1)
    state: int = betterproto.int32_field(3)
    """CONTAINER_CREATED 0, RUNNING 1, EXITED 2, UNKNOWN 3."""


@dataclass(eq=False, repr=False)
class ContainerStatusResponse(betterproto.Message):
    status: ContainerStatus = betterproto.message_field(1)
    info: dict[str, str] = betterproto.map_field(2, STR, STR)
    """With ``verbose``: containerd's ``info`` JSON, which has the process's ``pid``."""


@dataclass(eq=False, repr=False)
class ListPodSandboxRequest(betterproto.Message):
    pass


@dataclass(eq=False, repr=False)
class PodSandbox(betterproto.Message):
    id: str = betterproto.string_field(1)
    metadata: PodSandboxMetadata = betterproto.message_field(2)
    state: int = betterproto.int32_field(3)


@dataclass(eq=False, repr=False)
class ListPodSandboxResponse(betterproto.Message):
    items: list[PodSandbox] = betterproto.message_field(1)


@dataclass(eq=False, repr=False)
class ListContainersRequest(betterproto.Message):
    pass


@dataclass(eq=False, repr=False)
class Container(betterproto.Message):
    id: str = betterproto.string_field(1)
    pod_sandbox_id: str = betterproto.string_field(2)
    metadata: ContainerMetadata = betterproto.message_field(3)
    state: int = betterproto.int32_field(6)


@dataclass(eq=False, repr=False)
class ListContainersResponse(betterproto.Message):
    containers: list[Container] = betterproto.message_field(1)


@dataclass(eq=False, repr=False)
class VersionRequest(betterproto.Message):
    version: str = betterproto.string_field(1)


@dataclass(eq=False, repr=False)
class VersionResponse(betterproto.Message):
    version: str = betterproto.string_field(1)
    runtime_name: str = betterproto.string_field(2)
    runtime_version: str = betterproto.string_field(3)
