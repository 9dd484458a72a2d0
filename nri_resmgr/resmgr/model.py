"""What the resource manager knows about pods and containers, independent of the wire format.

The NRI layer converts runtime messages into these values; policies read them and answer
with adjustments and updates. Keeping them apart from the generated protobuf classes lets
policies (and their tests) stay free of transport details.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Mapping
from enum import Enum

import attrs

from nri_resmgr.cpuset import CpuSet


class ContainerState(Enum):
    UNKNOWN = 0
    CREATED = 1
    PAUSED = 2
    RUNNING = 3
    STOPPED = 4


@attrs.frozen
class Resources:
    """The Linux resources of a container (the subset policies read or set)."""

    cpu_shares: int | None = None
    cpu_quota: int | None = None
    cpu_period: int | None = None
    cpuset_cpus: str | None = None
    cpuset_mems: str | None = None
    memory_limit: int | None = None


@attrs.frozen
class Pod:
    id: str
    name: str
    namespace: str
    uid: str = ""
    labels: Mapping[str, str] = attrs.field(factory=dict)
    annotations: Mapping[str, str] = attrs.field(factory=dict)
    cgroup_parent: str = ""
    # Pod-level resources (the sum of the containers' requests) as the runtime reports them.
    resources: Resources | None = None


@attrs.frozen
class DeviceNode:
    """A device node the runtime creates in a container (its OCI ``linux.devices``)."""

    type: str
    """``c`` or ``b`` (``char``/``block`` also taken)."""
    major: int
    minor: int
    writable: bool = True
    """The container's device cgroup rules let it write (nri-plugins isReadOnlyDevice): only
    writable devices give topology hints."""


def device_writable(node: tuple[str, int, int], rules: Iterable[tuple[str, int, int, str]]) -> bool:
    """nri-plugins isReadOnlyDevice, negated: ``(type, major, minor, access)`` rules in
    order; a wildcard rule (no type, 0:0) with ``w`` makes devices writable, the device's own
    rule decides for it. (Upstream reads ``access`` alone, not ``allow``.)"""
    writable = False
    for rtype, rmajor, rminor, access in rules:
        if (rtype, rmajor, rminor) == ("", 0, 0):
            writable = writable or "w" in access
        elif (rtype, rmajor, rminor) == node:
            return writable or "w" in access
    return writable


@attrs.frozen
class Container:
    id: str
    pod_id: str
    name: str
    state: ContainerState = ContainerState.UNKNOWN
    labels: Mapping[str, str] = attrs.field(factory=dict)
    annotations: Mapping[str, str] = attrs.field(factory=dict)
    resources: Resources | None = None
    pid: int = 0
    claims: Mapping[str, str] = attrs.field(factory=dict)
    """DRA claim UID -> the cpuset string its CDI env edit carries (``claim_env_name``), as
    found in the container's environment. Untrusted: the pod spec can set any env too."""
    claim_keys: Mapping[str, str] = attrs.field(factory=dict)
    """DRA claim UID -> the claim's key (``claim_key_name``) found in the environment: the
    proof that the claim's CDI spec, not the pod spec, set the claim's variables."""
    cdi_devices: tuple[str, ...] = ()
    """Fully qualified CDI device names the runtime injected (containerd >= 2.3 only)."""
    devices: tuple[DeviceNode, ...] = ()
    """Device nodes in the container: where they sit in sysfs gives topology hints."""
    oom_score_adj: int | None = None
    """linux.oom_score_adj as kubelet set it: for a Burstable container it encodes the memory
    request (``requests.memory_request``), which the OCI spec does not carry otherwise."""


@attrs.frozen(cache_hash=True)
class Adjustment:
    """Changes a policy asks for on a container being created.

    ``None`` means "leave as the runtime has it". Only these fields are carried on the wire.
    """

    cpuset_cpus: str | None = None
    cpuset_mems: str | None = None
    cpu_shares: int | None = None
    cpu_quota: int | None = None
    cpu_period: int | None = None
    memory_limit: int | None = None

    def is_empty(self) -> bool:
        # Field by field, not attrs.astuple: asked on every CreateContainer reply.
        return (
            self.cpuset_cpus is None
            and self.cpuset_mems is None
            and self.cpu_shares is None
            and self.cpu_quota is None
            and self.cpu_period is None
            and self.memory_limit is None
        )


@attrs.frozen
class Update:
    """A change to an existing container, sent to the runtime as a ContainerUpdate."""

    container_id: str
    adjustment: Adjustment
    ignore_failure: bool = False


AttributeValue = str | int | bool


@attrs.frozen
class Device:
    """A device a policy offers through DRA (published in the node's ResourceSlice).

    API-version free: the DRA layer renders it for whichever ``resource.k8s.io`` version the
    API server serves. Attribute and capacity names are unqualified (filed under the driver
    name) or ``<domain>/<name>``.
    """

    name: str
    attributes: Mapping[str, AttributeValue] = attrs.field(factory=dict)
    capacity: Mapping[str, int] = attrs.field(factory=dict)
    """Capacity name -> an integer quantity (published as a Kubernetes quantity string)."""
    cpus: tuple[int, ...] = ()
    """The host CPUs this device stands for; never published, read by Prepare."""
    shared: bool = False
    """Several claims share the device, each consuming part of its ``cpu`` capacity: Prepare
    picks that many of ``cpus`` (a grouped device); else a claim gets all of ``cpus``."""
    min_request: int = 1
    """A shared device: the fewest CPUs one claim consumes; the scheduler rounds a smaller
    request up to it (the balloons policy's minCPUs)."""


GROUP_CAPACITY = "cpu"
"""The capacity a grouped (shared) device offers and claims consume: CPUs (dra-driver-cpu's
name)."""

CLAIM_ENV_PREFIX = "NRI_DRA_CPUS_"
"""The env var a prepared claim's CDI spec injects: ``NRI_DRA_CPUS_<uid, - as _>=<cpuset>``."""
CLAIM_KEY_PREFIX = "NRI_DRA_KEY_"
"""The env var carrying the claim's key: ``NRI_DRA_KEY_<uid, - as _>=<key>``."""


def claim_env_name(claim_uid: str) -> str:
    # Env names cannot carry '-'; a UID is hex and '-', so '_' maps back without loss.
    return CLAIM_ENV_PREFIX + claim_uid.replace("-", "_")


def claim_key_name(claim_uid: str) -> str:
    return CLAIM_KEY_PREFIX + claim_uid.replace("-", "_")


def claims_from_env(env: Iterable[str]) -> tuple[dict[str, str], dict[str, str]]:
    """(claim UID -> cpus, claim UID -> key) of the claim env vars in ``env`` (``KEY=VALUE``
    strings)."""
    cpus: dict[str, str] = {}
    keys: dict[str, str] = {}
    for entry in env:
        if not entry.startswith("NRI_DRA_"):
            continue
        name, _, value = entry.partition("=")
        for prefix, found in ((CLAIM_ENV_PREFIX, cpus), (CLAIM_KEY_PREFIX, keys)):
            if name.startswith(prefix) and len(name) > len(prefix):
                found[name[len(prefix) :].replace("_", "-")] = value
    return cpus, keys


@attrs.frozen
class ClaimGrant:
    """A prepared DRA claim as a policy holds it: its CPUs, and what proves that a container
    is the claim's (``claim_refusal``). The pod spec can set any env var, so the claim's
    variables alone prove nothing."""

    uid: str
    namespace: str
    cpus: CpuSet
    key: str = attrs.field(repr=False)
    """A random value only the claim's CDI spec carries (not derived from UID or CPUs)."""
    cdi_device: str
    """The claim's fully qualified CDI device, as a runtime that reports CDI devices lists it."""
    grouped: bool = False
    """Allocated from grouped devices (consumable capacity): its CPUs come from the CPUs set
    apart for grouped claims, which per-CPU claims never touch."""
    devices: tuple[str, ...] = ()
    """The names of this driver's devices the claim's allocation names (from its record), so
    a policy whose devices mean more than CPUs (balloons: a balloon type) knows which."""


def claim_refusal(pod: Pod, container: Container, grant: ClaimGrant) -> str | None:
    """Why ``container`` of ``pod`` is not ``grant``'s claim's, or None when it is.

    The runtime's word first: a runtime that reports the container's CDI devices (containerd
    >= 2.3) must list the claim's. One that reports none (older runtimes) leaves the claim's
    key, which only the CDI spec injects. Either way the pod must be in the claim's namespace
    (kubelet gives a claim only to pods of its namespace) and the variable must name the
    claim's CPUs.
    """
    value = container.claims.get(grant.uid, "")
    if not _names_cpus(value, grant.cpus):
        return f"its variable says cpus {value!r}, the claim holds {grant.cpus}"
    if pod.namespace != grant.namespace:
        return f"the pod is in namespace {pod.namespace!r}, the claim in {grant.namespace!r}"
    if container.cdi_devices:
        if grant.cdi_device in container.cdi_devices:
            return None
        return f"the runtime did not inject the claim's CDI device {grant.cdi_device}"
    if not hmac.compare_digest(container.claim_keys.get(grant.uid, ""), grant.key):
        return (
            "its claim key is missing or wrong (the variables were not set by the claim's CDI spec)"
        )
    return None


def _names_cpus(text: str, cpus: CpuSet) -> bool:
    try:
        return CpuSet.parse(text) == cpus
    except ValueError:
        return False
