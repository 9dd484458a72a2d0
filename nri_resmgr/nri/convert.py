"""Conversions between NRI protobuf messages and the wire-independent resource-manager model.

Only what policies read or set crosses over: identity, labels and annotations, state, and the
CPU/memory resources (cpuset cpus/mems, CPU shares/quota/period, memory limit), the DRA
claims a container names (its claim env vars and injected CDI devices; other env is dropped),
and its device nodes (type, major, minor, writable by the device cgroup rules).
"""

from __future__ import annotations

import betterproto

from nri_resmgr._gen.nri.pkg.api import v1alpha1 as api
from nri_resmgr.resmgr import model


def _present(msg: betterproto.Message) -> bool:
    """Whether an optional sub-message was on the wire (or set by us), even if all-zero."""
    return betterproto.serialized_on_wire(msg)


def _opt(wrapper: api.OptionalInt64 | api.OptionalUInt64) -> int | None:
    return wrapper.value if _present(wrapper) else None


def resources_from_proto(res: api.LinuxResources) -> model.Resources | None:
    if not _present(res):
        return None
    cpu, mem = res.cpu, res.memory
    return model.Resources(
        cpu_shares=_opt(cpu.shares),
        cpu_quota=_opt(cpu.quota),
        cpu_period=_opt(cpu.period),
        cpuset_cpus=cpu.cpus or None,
        cpuset_mems=cpu.mems or None,
        memory_limit=_opt(mem.limit),
    )


def resources_to_proto(res: model.Resources | model.Adjustment) -> api.LinuxResources:
    """Only the fields that are set go on the wire; an absent wrapper means "unchanged"."""
    cpu = api.LinuxCpu(cpus=res.cpuset_cpus or "", mems=res.cpuset_mems or "")
    if res.cpu_shares is not None:
        cpu.shares = api.OptionalUInt64(value=res.cpu_shares)
    if res.cpu_quota is not None:
        cpu.quota = api.OptionalInt64(value=res.cpu_quota)
    if res.cpu_period is not None:
        cpu.period = api.OptionalUInt64(value=res.cpu_period)
    out = api.LinuxResources()
    if _present(cpu):
        out.cpu = cpu
    if res.memory_limit is not None:
        out.memory = api.LinuxMemory(limit=api.OptionalInt64(value=res.memory_limit))
    return out


def pod_from_proto(pod: api.PodSandbox) -> model.Pod:
    linux = pod.linux
    return model.Pod(
        id=pod.id,
        name=pod.name,
        namespace=pod.namespace,
        uid=pod.uid,
        labels=dict(pod.labels),
        annotations=dict(pod.annotations),
        cgroup_parent=linux.cgroup_parent,
        resources=resources_from_proto(linux.pod_resources),
    )


def pod_to_proto(pod: model.Pod) -> api.PodSandbox:
    linux = api.LinuxPodSandbox(cgroup_parent=pod.cgroup_parent)
    if pod.resources is not None:
        linux.pod_resources = resources_to_proto(pod.resources)
    return api.PodSandbox(
        id=pod.id,
        name=pod.name,
        namespace=pod.namespace,
        uid=pod.uid,
        labels=dict(pod.labels),
        annotations=dict(pod.annotations),
        linux=linux,
    )


def container_from_proto(ctr: api.Container) -> model.Container:
    claims, keys = model.claims_from_env(ctr.env)
    return model.Container(
        id=ctr.id,
        pod_id=ctr.pod_sandbox_id,
        name=ctr.name,
        state=_state_from_proto(ctr.state),
        labels=dict(ctr.labels),
        annotations=dict(ctr.annotations),
        resources=resources_from_proto(ctr.linux.resources),
        pid=ctr.pid,
        claims=claims,
        claim_keys=keys,
        cdi_devices=tuple(d.name for d in ctr.cdi_devices),
        devices=_device_nodes(ctr.linux),
        oom_score_adj=ctr.linux.oom_score_adj.value if _present(ctr.linux.oom_score_adj) else None,
    )


def _device_nodes(linux: api.LinuxContainer) -> tuple[model.DeviceNode, ...]:
    if not linux.devices:
        return ()
    rules = [(r.type, _opt(r.major) or 0, _opt(r.minor) or 0, r.access)
             for r in linux.resources.devices]  # fmt: skip
    return tuple(
        model.DeviceNode(
            d.type, d.major, d.minor, model.device_writable((d.type, d.major, d.minor), rules)
        )
        for d in linux.devices
    )


def _device_rules(ctr: model.Container) -> list[api.LinuxDeviceCgroup]:
    """One cgroup rule per device node, ``rwm`` or ``r`` as it is writable or not."""
    return [
        api.LinuxDeviceCgroup(
            allow=True,
            type=d.type,
            major=api.OptionalInt64(value=d.major),
            minor=api.OptionalInt64(value=d.minor),
            access="rwm" if d.writable else "r",
        )
        for d in ctr.devices
    ]


def container_to_proto(ctr: model.Container) -> api.Container:
    out = api.Container(
        id=ctr.id,
        pod_sandbox_id=ctr.pod_id,
        name=ctr.name,
        state=api.ContainerState(ctr.state.value),
        labels=dict(ctr.labels),
        annotations=dict(ctr.annotations),
        pid=ctr.pid,
        env=[
            *(f"{model.claim_env_name(uid)}={cpus}" for uid, cpus in ctr.claims.items()),
            *(f"{model.claim_key_name(uid)}={key}" for uid, key in ctr.claim_keys.items()),
        ],
        cdi_devices=[api.CdiDevice(name=name) for name in ctr.cdi_devices],
    )
    if ctr.resources is not None or ctr.oom_score_adj is not None or ctr.devices:
        linux = api.LinuxContainer()
        if ctr.resources is not None:
            linux.resources = resources_to_proto(ctr.resources)
        if ctr.oom_score_adj is not None:
            linux.oom_score_adj = api.OptionalInt(value=ctr.oom_score_adj)
        if ctr.devices:
            linux.devices = [api.LinuxDevice(type=d.type, major=d.major, minor=d.minor)
                             for d in ctr.devices]  # fmt: skip
            if ctr.resources is not None:
                linux.resources.devices = _device_rules(ctr)
        out.linux = linux
    return out


def _state_from_proto(state: int) -> model.ContainerState:
    try:
        return model.ContainerState(int(state))
    except ValueError:
        return model.ContainerState.UNKNOWN


def adjustment_to_proto(adj: model.Adjustment) -> api.ContainerAdjustment:
    if adj.is_empty():
        return api.ContainerAdjustment()
    linux = api.LinuxContainerAdjustment(resources=resources_to_proto(adj))
    return api.ContainerAdjustment(linux=linux)


def adjustment_from_proto(adj: api.ContainerAdjustment) -> model.Adjustment:
    res = resources_from_proto(adj.linux.resources)
    return _adjustment_of(res)


def _adjustment_of(res: model.Resources | None) -> model.Adjustment:
    if res is None:
        return model.Adjustment()
    return model.Adjustment(
        cpuset_cpus=res.cpuset_cpus,
        cpuset_mems=res.cpuset_mems,
        cpu_shares=res.cpu_shares,
        cpu_quota=res.cpu_quota,
        cpu_period=res.cpu_period,
        memory_limit=res.memory_limit,
    )


def update_to_proto(update: model.Update) -> api.ContainerUpdate:
    return api.ContainerUpdate(
        container_id=update.container_id,
        linux=api.LinuxContainerUpdate(resources=resources_to_proto(update.adjustment)),
        ignore_failure=update.ignore_failure,
    )


def update_from_proto(update: api.ContainerUpdate) -> model.Update:
    return model.Update(
        container_id=update.container_id,
        adjustment=_adjustment_of(resources_from_proto(update.linux.resources)),
        ignore_failure=update.ignore_failure,
    )
