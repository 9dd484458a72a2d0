"""Configuration models: the ``spec`` of the policy custom resources (group ``config.nri``).

Each policy kind has its own spec class; all of them embed the common sections (``log``,
``instrumentation``, ``agent``, ``control``, ``dra``), so DRA, like everything else, is
configured per policy. Values are frozen; ``loader`` turns YAML into them and back.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import attrs

from nri_resmgr.config.fields import field
from nri_resmgr.config.values import CpuConstraint, parse_cpu, parse_memory
from nri_resmgr.quantity import Quantity

API_GROUP = "config.nri"
API_VERSION = "v1alpha1"
GROUP_VERSION = f"{API_GROUP}/{API_VERSION}"

CPUPriority = Literal["high", "normal", "low", "none"]
TopologyLevel = Literal["system", "package", "die", "numa", "l3cache"]


CpuDeviceMode = Literal["individual", "grouped"]
CpuGroupBy = Literal["numanode", "socket"]


@attrs.frozen
class DraConfig:
    # None (unset): on exactly when the policy asks for devices (config.draswitch); an
    # explicit false keeps DRA off even then.
    enabled: bool | None = None
    cpu_device_mode: CpuDeviceMode | None = field(key="cpuDeviceMode", default=None)
    """``individual`` (unset: the default) publishes one device per CPU; ``grouped`` one
    device per NUMA node or socket whose capacity in CPUs claims consume (topology-aware
    only; needs Kubernetes' consumable capacity, on by default from 1.36)."""
    group_by: CpuGroupBy | None = field(key="groupBy", default=None)
    """Grouped mode: ``numanode`` (unset: the default) or ``socket``."""
    grouped_cpus: str | None = field(key="groupedCPUs", default=None)
    """Grouped mode (required there): the cpuset set apart for claims. Native containers
    never run on it, so a group's capacity is what Prepare can always give."""


@attrs.frozen
class KlogConfig:
    # klog keys are snake_case in the Go CRDs; keep them so existing CRs load unchanged.
    skip_headers: bool | None = field(key="skip_headers", default=None)
    v: int | None = None


@attrs.frozen
class LogConfig:
    debug: tuple[str, ...] = ()
    source: bool = False
    klog: KlogConfig = KlogConfig()


@attrs.frozen
class MetricsConfig:
    enabled: tuple[str, ...] = ("policy", "buildinfo")
    polled: tuple[str, ...] = ()


@attrs.frozen
class InstrumentationConfig:
    sampling_rate_per_million: int = 0
    tracing_collector: Literal["", "otlp-http", "otlp-grpc"] = ""
    metrics_exporter: Literal["", "prometheus", "otlp-http", "otlp-grpc"] = ""
    report_period: str = "30s"
    log_exporter: Literal["", "otlp-http", "otlp-grpc"] = ""
    log_export_period: str = ""
    http_endpoint: str = ""
    prometheus_export: bool = False
    metrics: MetricsConfig = MetricsConfig()


@attrs.frozen
class AgentConfig:
    node_resource_topology: bool = True
    pod_resource_api: bool = field(key="podResourceAPI", default=False)


@attrs.frozen
class CpuClass:
    min_freq: int = 0
    max_freq: int = 0
    energy_performance_preference: int = 0
    uncore_min_freq: int = 0
    uncore_max_freq: int = 0
    freq_governor: str = ""
    disabled_cstates: tuple[str, ...] = ()


@attrs.frozen
class CpuControl:
    classes: dict[str, CpuClass] = attrs.field(factory=dict)


@attrs.frozen
class ClassControl:
    """RDT and block I/O control: accepted for compatibility with nri-plugins CRs.

    The class definitions are kept as given (free-form); nri-resmgr does not apply them yet.
    """

    enable: bool = False
    use_pod_qos_as_default_class: bool = field(key="usePodQoSAsDefaultClass", default=False)
    options: dict[str, Any] = attrs.field(factory=dict)
    partitions: dict[str, Any] = attrs.field(factory=dict)
    classes: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class ControlConfig:
    cpu: CpuControl = CpuControl()
    rdt: ClassControl = ClassControl()
    blockio: ClassControl = ClassControl()


@attrs.frozen
class Constraints:
    """``reservedResources`` / ``availableResources``.

    ``cpu`` is a quantity (``750m``, ``2``), ``cpuset:<list>`` or ``exclude-cpuset:<list>``,
    ``memory`` a quantity: typed values (``values.py``) that the policies interpret against
    the hardware.
    """

    cpu: CpuConstraint | None = None
    memory: Quantity | None = None

    @classmethod
    def of(cls, cpu: str | None = None, memory: str | None = None) -> Constraints:
        """From text, as code and tests write them (the loader structures its own values);
        InvalidValue for a bad one."""
        return cls(
            None if cpu is None else parse_cpu(cpu),
            None if memory is None else parse_memory(memory),
        )


@attrs.frozen
class PolicySpec:
    """The sections every policy kind shares."""

    kind: ClassVar[str] = ""
    policy_name: ClassVar[str] = ""

    log: LogConfig = LogConfig()
    instrumentation: InstrumentationConfig = InstrumentationConfig()
    agent: AgentConfig = AgentConfig()
    control: ControlConfig = ControlConfig()
    dra: DraConfig = DraConfig()
    reserved_resources: Constraints = Constraints()
    available_resources: Constraints = Constraints()


@attrs.frozen
class TemplateSpec(PolicySpec):
    kind: ClassVar[str] = "TemplatePolicy"
    policy_name: ClassVar[str] = "template"


@attrs.frozen
class TopologyAwareSpec(PolicySpec):
    kind: ClassVar[str] = "TopologyAwarePolicy"
    policy_name: ClassVar[str] = "topology-aware"

    pin_cpu: bool = field(key="pinCPU", default=True)
    pin_memory: bool = True
    prefer_isolated_cpus: bool = field(key="preferIsolatedCPUs", default=True)
    prefer_shared_cpus: bool = field(key="preferSharedCPUs", default=False)
    colocate_pods: bool = False
    colocate_namespaces: bool = False
    reserved_pool_namespaces: tuple[str, ...] = ()
    default_cpu_priority: CPUPriority = field(key="defaultCPUPriority", default="none")
    unlimited_burstable: TopologyLevel = "package"
    # Upstream's scheduling and CPU classes, in the shapes its topology-aware Config has
    # (shared with balloons); accepted, said at load as not applied (topology_aware.keys).
    scheduling_classes: tuple[SchedulingClass, ...] = ()
    namespace_scheduling_classes: dict[str, str] = attrs.field(factory=dict)
    pod_qos_scheduling_classes: dict[str, str] = field(key="podQoSSchedulingClasses", factory=dict)
    cpu_classes: tuple[BalloonsCpuClass, ...] = field(key="cpuClasses", default=())
    shared_pool_cpu_class: str = field(key="sharedPoolCPUClass", default="")
    reserved_pool_cpu_class: str = field(key="reservedPoolCPUClass", default="")
    default_exclusive_cpu_class: str = field(key="defaultExclusiveCPUClass", default="")
    controllable_interrupts: tuple[str, ...] = ("*",)


ExprOperator = Literal[
    "Equals",
    "NotEqual",
    "In",
    "NotIn",
    "Exists",
    "NotExist",
    "AlwaysTrue",
    "Matches",
    "MatchesNot",
    "MatchesAny",
    "MatchesNone",
]
BalloonTopologyLevel = Literal["", "system", "package", "die", "numa", "l2cache", "core", "thread"]


@attrs.frozen
class Expression:
    """A match expression on a container (``pod/labels/app``, ``namespace``, ``qosclass``…)."""

    key: str
    operator: ExprOperator
    values: tuple[str, ...] = ()


@attrs.frozen
class ContainerMatch:
    """``preserve``: containers matching any expression are left as the runtime has them."""

    match_expressions: tuple[Expression, ...] = ()


@attrs.frozen
class BalloonTypeDra:
    """``balloonTypes[].dra`` (this project's key; upstream's balloons have no DRA): a type
    with ``publish: true`` offers devices from which a claim takes a balloon of the type
    with the CPUs it asks for. Applied by the balloons policy (issue 38); the keys' semantics
    are in docs/configuration.md once they are applied."""

    publish: bool = False
    group_by: CpuGroupBy | None = field(key="groupBy", default=None)
    """Where a claim's balloon sits: one device per ``numanode`` (unset: the default) or
    ``socket``, as topology-aware's grouped mode groups its devices."""


@attrs.frozen
class BalloonComponent:
    balloon_type: str


@attrs.frozen
class LoadClass:
    name: str
    level: Literal["l2cache", "core"]
    overloads_level_in_balloon: bool = False


@attrs.frozen
class SchedulingClass:
    """Linux scheduling and I/O priority parameters for containers (``schedulingClasses`` of
    balloons and topology-aware)."""

    name: str
    policy: Literal["", "none", "other", "fifo", "rr", "batch", "iso", "idle", "deadline"] = ""
    nice: int | None = None
    priority: int | None = None
    flags: tuple[
        Literal[
            "reset-on-fork",
            "reclaim",
            "dl-overrun",
            "keep-policy",
            "keep-params",
            "util-clamp-min",
            "util-clamp-max",
        ],
        ...,
    ] = ()
    runtime: int | None = None
    deadline: int | None = None
    period: int | None = None
    io_class: Literal["", "none", "rt", "be", "idle"] = ""
    io_priority: int | None = None


@attrs.frozen
class BalloonsCpuClass:
    """A ``cpuClasses`` entry (balloons and topology-aware): frequencies are strings
    ("turbo", "base", "2GHz")."""

    name: str
    min_freq: str = ""
    max_freq: str = ""
    energy_performance_preference: int | None = None
    uncore_min_freq: str = ""
    uncore_max_freq: str = ""
    freq_governor: str = ""
    disabled_cstates: tuple[str, ...] = ()
    turbo_priority: int | None = None
    pct_min_freq: str = field(key="pctMinFreq", default="")
    pct_max_freq: str = field(key="pctMaxFreq", default="")
    pct_priority: Literal["", "high", "low"] = field(key="pctPriority", default="")
    sst_clos_id: int | None = field(key="sstClosID", default=None)
    publish_extended_resource: bool = False


@attrs.frozen
class BalloonType:
    name: str
    namespaces: tuple[str, ...] = ()
    match_expressions: tuple[Expression, ...] = ()
    group_by: str = ""
    components: tuple[BalloonComponent, ...] = ()
    component_creation: Literal["", "all", "balance-balloons"] = ""
    min_cpus: int = field(key="minCPUs", default=0)
    max_cpus: int = field(key="maxCPUs", default=0)
    min_balloons: int = 0
    max_balloons: int = 0
    memory_types: tuple[str, ...] = ()
    allocator_priority: CPUPriority = "high"
    cpu_class: str = field(key="cpuClass", default="")
    pin_memory: bool | None = None
    prefer_spread_on_physical_cores: bool | None = None
    allocator_topology_balancing: bool | None = None
    hide_hyperthreads: bool | None = None
    loads: tuple[str, ...] = ()
    share_idle_cpus_in_same: BalloonTopologyLevel = field(key="shareIdleCPUsInSame", default="")
    prefer_isol_cpus: bool = False
    prefer_spreading_pods: bool = False
    prefer_per_namespace_balloon: bool = False
    prefer_new_balloons: bool = False
    prefer_close_to_devices: tuple[str, ...] = ()
    prefer_core_type: Literal["", "efficient", "performance"] = ""
    scheduling_class: str = ""
    show_containers_in_nrt: bool | None = field(key="showContainersInNrt", default=None)
    irq_claim: tuple[str, ...] = ()
    irq_mode: str = ""
    dra: BalloonTypeDra | None = None


@attrs.frozen
class BalloonsSpec(PolicySpec):
    kind: ClassVar[str] = "BalloonsPolicy"
    policy_name: ClassVar[str] = "balloons"

    pin_cpu: bool = field(key="pinCPU", default=True)
    pin_memory: bool = True
    idle_cpu_class: str = field(key="idleCPUClass", default="")
    reserved_pool_namespaces: tuple[str, ...] = ()
    allocator_topology_balancing: bool = False
    prefer_spread_on_physical_cores: bool = False
    balloon_types: tuple[BalloonType, ...] = ()
    preserve: ContainerMatch | None = None
    show_containers_in_nrt: bool | None = field(key="showContainersInNrt", default=None)
    load_classes: tuple[LoadClass, ...] = ()
    scheduling_classes: tuple[SchedulingClass, ...] = ()
    cpu_classes: tuple[BalloonsCpuClass, ...] = field(key="cpuClasses", default=())
    turbo_domain: Literal["package", "system"] = "package"
    controllable_interrupts: tuple[str, ...] = ("*",)


SPEC_KINDS: dict[str, type[PolicySpec]] = {
    cls.kind: cls for cls in (TopologyAwareSpec, BalloonsSpec, TemplateSpec)
}
SPEC_BY_POLICY: dict[str, type[PolicySpec]] = {cls.policy_name: cls for cls in SPEC_KINDS.values()}


@attrs.frozen
class PolicyDocument:
    """A whole policy CR (or a local config file of the same shape)."""

    kind: str
    spec: PolicySpec
    name: str = ""
    namespace: str = ""
    uid: str = ""
    generation: int = 0
    resource_version: str = ""

    @property
    def policy_name(self) -> str:
        return self.spec.policy_name
