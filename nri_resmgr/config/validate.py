"""Checks across fields that types alone cannot express.

Hardware-dependent checks (does the reserved cpuset exist on this machine?) belong to the
policies; here are the ones that hold on any node.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from nri_resmgr.config.expressions import check_expressions, check_group_by
from nri_resmgr.config.models import BalloonsSpec, BalloonType, PolicySpec, TopologyAwareSpec
from nri_resmgr.cpuset import CpuSet, CpuSetError
from nri_resmgr.errors import ConfigError
from nri_resmgr.shorten import short_repr, shorten

# Bounds on the raw document, checked before anything walks it. The typed parts of a spec
# are at most six levels deep; the free-form ones (control.rdt, control.blockio) are kept,
# not applied, so nothing legitimate comes near these limits.
MAX_SPEC_DEPTH = 24
MAX_SPEC_NODES = 20_000
_DURATION = re.compile(r"^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$")
# A cpufreq governor's name as the kernel has them (CPUFREQ_NAME_LEN 16 with the NUL):
# performance, powersave, schedutil, ... The value is written to scaling_governor.
_GOVERNOR = re.compile(r"[a-z0-9_]{1,15}")


def check_bounds(data: Any, path: str = "spec") -> None:
    """Refuses a raw spec nested too deep or too large, without recursion.

    The API server lets a free-form field nest 10,000 levels; every later step (structuring,
    comparison, logging) would walk it, some recursively. One error names the first offender.
    """
    stack: list[tuple[Any, str, int]] = [(data, path, 0)]
    nodes = 0
    while stack:
        value, where, depth = stack.pop()
        nodes += 1
        if nodes > MAX_SPEC_NODES:
            raise ConfigError(f"{path}: more than {MAX_SPEC_NODES} values")
        if depth > MAX_SPEC_DEPTH:
            raise ConfigError(f"{shorten(where)}: nested deeper than {MAX_SPEC_DEPTH} levels")
        if isinstance(value, Mapping):
            stack.extend((v, f"{where}.{shorten(str(k), 40)}", depth + 1) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value))


def _check_balloons(spec: BalloonsSpec, path: str) -> list[str]:
    errors, seen = [], set()
    for i, bt in enumerate(spec.balloon_types):
        where = f"{path}.balloonTypes[{i}]"
        if not bt.name:
            errors.append(f"{where}.name: must not be empty")
        elif bt.name in seen:
            errors.append(f"{where}.name: duplicate balloon type {short_repr(bt.name)}")
        seen.add(bt.name)
        if bt.max_cpus > 0 and bt.min_cpus > bt.max_cpus:
            errors.append(f"{where}: minCPUs ({bt.min_cpus}) exceeds maxCPUs ({bt.max_cpus})")
        if bt.min_cpus < 0 or bt.min_balloons < 0 or bt.max_balloons < 0:
            errors.append(f"{where}: minCPUs, minBalloons and maxBalloons must not be negative")
        errors += [
            f"{where}.namespaces[{j}]: empty pattern"
            for j, glob in enumerate(bt.namespaces)
            if not glob
        ]
        if bt.max_balloons > 0 and bt.min_balloons > bt.max_balloons:
            errors.append(
                f"{where}: minBalloons ({bt.min_balloons}) exceeds maxBalloons ({bt.max_balloons})"
            )
        errors += _check_balloon_refs(spec, bt, where)
        errors += _check_balloon_dra(bt, f"{where}.dra")
    errors += check_expressions(
        spec.preserve.match_expressions if spec.preserve else (), f"{path}.preserve"
    )
    return errors


MAX_DRA_STRING = 64
"""A DRA device attribute's string value is at most 64 characters (the type's name is one)."""


def _check_balloon_dra(bt: BalloonType, where: str) -> list[str]:
    """The balloon types that can publish DRA devices (``balloonTypes[].dra``)."""
    dra = bt.dra
    if dra is None:
        return []
    if not dra.publish:
        return [f"{where}.groupBy: applies only with publish: true"] if dra.group_by else []
    why = None
    if bt.name in ("reserved", "default"):
        why = (
            f"the built-in {bt.name!r} balloon is one instance the policy keeps itself; "
            "a claim gets a balloon of its own"
        )
    elif bt.components:
        why = "a composite type's CPUs are its components' balloons, not CPUs a claim can consume"
    elif bt.max_cpus < 0:
        why = "maxCPUs < 0: the type never holds a container"
    elif len(bt.name) > MAX_DRA_STRING:
        why = f"the type's name is published as an attribute, at most {MAX_DRA_STRING} characters"
    return [] if why is None else [f"{where}.publish: cannot publish type {bt.name!r}: {why}"]


def _check_balloon_refs(spec: BalloonsSpec, bt: BalloonType, where: str) -> list[str]:
    """References from a balloon type to other parts of the spec, and its expressions."""
    errors = check_expressions(bt.match_expressions, where)
    loads = {lc.name for lc in spec.load_classes}
    errors += [
        f"{where}.loads[{j}]: unknown load class {name!r}"
        for j, name in enumerate(bt.loads)
        if name not in loads
    ]
    types = {t.name for t in spec.balloon_types}
    errors += [
        f"{where}.components[{j}].balloonType: unknown balloon type {c.balloon_type!r}"
        for j, c in enumerate(bt.components)
        if c.balloon_type not in types or c.balloon_type == bt.name
    ]
    if bt.component_creation and not bt.components:
        errors.append(f"{where}.componentCreation: {bt.component_creation!r} without components")
    classes = {sc.name for sc in spec.scheduling_classes}
    if bt.scheduling_class and bt.scheduling_class not in classes:
        errors.append(f"{where}.schedulingClass: unknown scheduling class {bt.scheduling_class!r}")
    if bt.group_by:
        errors += check_group_by(bt.group_by, f"{where}.groupBy")
    return errors


_POD_QOS = ("besteffort", "burstable", "guaranteed")


def _check_topology_aware_classes(spec: TopologyAwareSpec, path: str) -> list[str]:
    """The class references upstream's topology-aware Config.Validate checks: they are not
    applied here, but a CR upstream would refuse is refused here too."""
    scheduling = {sc.name for sc in spec.scheduling_classes}
    errors = [
        f"{path}.podQoSSchedulingClasses.{shorten(qos, 40)}: not a pod QoS class "
        f"(BestEffort, Burstable, Guaranteed)"
        for qos in spec.pod_qos_scheduling_classes
        if qos.lower() not in _POD_QOS
    ]
    for key, table in (
        ("podQoSSchedulingClasses", spec.pod_qos_scheduling_classes),
        ("namespaceSchedulingClasses", spec.namespace_scheduling_classes),
    ):
        errors += [
            f"{path}.{key}.{shorten(name, 40)}: unknown scheduling class {short_repr(cls)}"
            for name, cls in table.items()
            if cls not in scheduling
        ]
    # As upstream, the CPU class names are checked only when cpuClasses are defined.
    cpu = {c.name for c in spec.cpu_classes}
    if cpu and not spec.shared_pool_cpu_class:
        errors.append(f"{path}.sharedPoolCPUClass: required when cpuClasses are defined")
    errors += [
        f"{path}.{key}: unknown CPU class {short_repr(name)}"
        for key, name in (
            ("sharedPoolCPUClass", spec.shared_pool_cpu_class),
            ("reservedPoolCPUClass", spec.reserved_pool_cpu_class),
            ("defaultExclusiveCPUClass", spec.default_exclusive_cpu_class),
        )
        if cpu and name and name not in cpu
    ]
    return errors


def _check_dra(spec: PolicySpec, path: str) -> list[str]:
    dra = spec.dra
    if dra.cpu_device_mode != "grouped":
        return [
            f"{path}.{key}: applies only with cpuDeviceMode grouped"
            for key, value in (("groupBy", dra.group_by), ("groupedCPUs", dra.grouped_cpus))
            if value is not None
        ]
    if spec.policy_name != "topology-aware":
        return [f"{path}.cpuDeviceMode: grouped CPU devices are offered by topology-aware only"]
    if dra.grouped_cpus is None:
        return [f"{path}.groupedCPUs: required with cpuDeviceMode grouped (the CPUs for claims)"]
    try:
        cpus = CpuSet.parse(dra.grouped_cpus)
    except CpuSetError as e:
        return [f"{path}.groupedCPUs: {e}"]
    return [] if cpus else [f"{path}.groupedCPUs: must name at least one CPU"]


def validate_spec(spec: PolicySpec, path: str = "spec") -> None:
    # The constraints' values are typed by the loader (values.py); one must be there.
    errors = []
    if spec.reserved_resources.cpu is None:
        errors.append(f"{path}.reservedResources.cpu: required key missing")
    inst = spec.instrumentation
    if inst.prometheus_export and inst.metrics_exporter not in ("", "prometheus"):
        errors.append(
            f"{path}.instrumentation.prometheusExport: cannot be combined with "
            f"metricsExporter {short_repr(inst.metrics_exporter)}"
        )
    if inst.report_period and not _DURATION.match(inst.report_period):
        errors.append(
            f"{path}.instrumentation.reportPeriod: expected a duration such as "
            f"'30s', got {short_repr(inst.report_period)}"
        )
    errors += [
        f"{path}.control.cpu.classes.{shorten(name, 40)}.freqGovernor: "
        f"{short_repr(c.freq_governor)} is not a cpufreq governor name (lowercase letters, "
        "digits and _, at most 15)"
        for name, c in spec.control.cpu.classes.items()
        if c.freq_governor and not _GOVERNOR.fullmatch(c.freq_governor)
    ]
    if isinstance(spec, BalloonsSpec):
        errors += _check_balloons(spec, path)
    if isinstance(spec, TopologyAwareSpec):
        errors += _check_topology_aware_classes(spec, path)
    errors += _check_dra(spec, f"{path}.dra")
    if errors:
        raise ConfigError(errors)
