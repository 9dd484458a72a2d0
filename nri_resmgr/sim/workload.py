"""The ``--workload`` file: Pods to create, and later steps (removals, config changes), in order.

The file is a YAML stream; each document is one of:

- a ``v1`` ``Pod``, or a ``v1`` ``List``/``PodList`` of them (``kubectl get pods -o yaml``):
  the pod is created, containers in manifest order, init containers first;
- a policy CR (``apiVersion: config.nri/v1alpha1``, the same document ``--config`` takes):
  from this point on the policy runs with that configuration, as after a CR update;
- ``{apiVersion: simulate.nri-resmgr/v1, kind: Remove, pods: [NAMESPACE/NAME | NAME, ...]}``:
  those pods are deleted (their containers stopped and removed, then the sandbox).

A document that cannot be used is a ``Problem`` naming the document, the pod or container
and the field; the other documents still run. Only a YAML syntax error stops everything.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import attrs
import yaml

from nri_resmgr.config import PolicyDocument, load_document
from nri_resmgr.config.documents import parse_yaml
from nri_resmgr.config.models import GROUP_VERSION
from nri_resmgr.errors import ConfigError, ResmgrError
from nri_resmgr.quantity import QuantityError, cpu_milli, memory_bytes
from nri_resmgr.sim.bounds import check_yaml

__all__ = [
    "STEP_API_VERSION",
    "AddPod",
    "Amounts",
    "ChangeConfig",
    "ContainerSpec",
    "PodSpec",
    "Problem",
    "RemovePods",
    "Role",
    "Step",
    "Workload",
    "WorkloadError",
    "parse_workload",
]

STEP_API_VERSION = "simulate.nri-resmgr/v1"
DEFAULT_NAMESPACE = "default"
# Resources that reach the runtime but that the simulated model does not carry.
_NOT_SIMULATED_PREFIXES = ("hugepages-",)
_FINISHED_PHASES = ("Succeeded", "Failed")


class WorkloadError(ResmgrError):
    """The workload file cannot be read at all (missing, or not YAML)."""


class Role(enum.Enum):
    INIT = "init"
    SIDECAR = "sidecar"
    """An init container with ``restartPolicy: Always``: it keeps running."""
    APP = "app"


@attrs.frozen
class Problem:
    where: str
    """The document, pod/container and field, e.g. ``document 3 (pod default/web)``."""
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


@attrs.frozen
class Amounts:
    cpu: int | None = None
    """mCPU; None when not given."""
    memory: int | None = None
    """Bytes; None when not given."""


@attrs.frozen
class ContainerSpec:
    name: str
    role: Role
    path: str
    """Where it sits in the manifest: ``spec.containers[1]``."""
    requests: Amounts
    """After the API server's defaulting: a limit without a request is also the request."""
    limits: Amounts
    image: str = ""


@attrs.frozen
class PodSpec:
    namespace: str
    name: str
    uid: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    containers: tuple[ContainerSpec, ...]
    """Init containers (and sidecars) first, in manifest order, then the app containers."""
    source: str
    termination_grace: int = 30
    reported_qos: str | None = None
    """``status.qosClass`` when the manifest came from a cluster."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@attrs.frozen
class AddPod:
    pod: PodSpec


@attrs.frozen
class RemovePods:
    pods: tuple[str, ...]
    """``namespace/name`` keys."""
    source: str


@attrs.frozen
class ChangeConfig:
    doc: PolicyDocument
    source: str


Step = AddPod | RemovePods | ChangeConfig


@attrs.frozen
class Workload:
    steps: tuple[Step, ...]
    problems: tuple[Problem, ...]
    notes: tuple[Problem, ...] = ()
    """Things accepted but worth saying (resources the simulation does not carry)."""


class _Invalid(ResmgrError):
    """One unusable field: the path and what is wrong with it."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


def parse_workload(text: str, source: str = "workload") -> Workload:
    steps: list[Step] = []
    problems: list[Problem] = []
    notes: list[Problem] = []
    seen: set[str] = set()
    for number, line, data in _documents(text, source):
        where = f"{source}: document {number} (line {line})"
        for step in _steps_of(data, where, problems, notes):
            if isinstance(step, AddPod):
                if step.pod.key in seen:
                    problems.append(Problem(step.pod.source, "a pod of that name already exists"))
                    continue
                seen.add(step.pod.key)
            steps.append(step)
    return Workload(tuple(steps), tuple(problems), tuple(notes))


def _documents(text: str, source: str) -> Iterator[tuple[int, int, Any]]:
    """Each non-empty document, parsed with the config loader's YAML 1.2 rules, once the
    whole text is within the bounds of ``sim.bounds``."""
    try:
        check_yaml(text, source)
    except ConfigError as exc:
        raise WorkloadError(str(exc)) from exc
    try:
        nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise WorkloadError(f"{source}: invalid YAML{at}: {getattr(exc, 'problem', exc)}") from exc
    for number, node in enumerate(nodes, 1):
        if node is None:
            continue
        piece = text[node.start_mark.index : node.end_mark.index]
        try:
            data = parse_yaml(piece, source)
        except ConfigError as exc:
            raise WorkloadError(str(exc)) from exc
        if data is not None:
            yield number, node.start_mark.line + 1, data


def _steps_of(
    data: Any, where: str, problems: list[Problem], notes: list[Problem]
) -> Iterator[Step]:
    if not isinstance(data, Mapping):
        problems.append(Problem(where, f"expected a mapping (a Pod), got {type(data).__name__}"))
        return
    api_version, kind = data.get("apiVersion"), data.get("kind")
    if api_version == GROUP_VERSION:
        try:
            yield ChangeConfig(load_document(data), where)
        except ConfigError as exc:
            problems.extend(Problem(f"{where} ({kind})", e) for e in exc.errors)
        return
    if api_version == STEP_API_VERSION:
        step = _remove_step(data, where, problems)
        if step is not None:
            yield step
        return
    if api_version == "v1" and kind in ("List", "PodList"):
        items = data.get("items") or []
        if not isinstance(items, list):
            problems.append(Problem(where, "items: expected a list"))
            return
        for i, item in enumerate(items):
            yield from _steps_of(item, f"{where} items[{i}]", problems, notes)
        return
    if api_version != "v1" or kind != "Pod":
        problems.append(
            Problem(
                where,
                f"{kind or 'a document without kind'} ({api_version}) is not a v1 Pod; "
                "simulate takes Pods (for controllers: kubectl get pods -o yaml)",
            )
        )
        return
    name = _pod_label(data)
    status = data.get("status")
    phase = status.get("phase") if isinstance(status, Mapping) else None
    if phase in _FINISHED_PHASES:
        # kubectl get pods lists completed pods too; kubelet runs nothing for them.
        notes.append(Problem(f"{where} (pod {name})", f"status.phase {phase}: not created"))
        return
    try:
        pod = _pod(data, f"{where} (pod {name})", notes)
    except _Invalid as exc:
        problems.append(Problem(f"{where} (pod {name})", str(exc)))
        return
    yield AddPod(pod)


def _remove_step(data: Mapping[str, Any], where: str, problems: list[Problem]) -> Step | None:
    if data.get("kind") != "Remove":
        problems.append(Problem(where, f"kind: {STEP_API_VERSION} has only kind Remove"))
        return None
    unknown = sorted(set(data) - {"apiVersion", "kind", "pods"})
    pods = data.get("pods")
    if unknown or not isinstance(pods, list) or not all(isinstance(p, str) for p in pods):
        detail = f"unknown keys {unknown}" if unknown else "expected a list of pod names"
        problems.append(Problem(where, f"pods: {detail} (NAMESPACE/NAME or NAME)"))
        return None
    keys = tuple(p if "/" in p else f"{DEFAULT_NAMESPACE}/{p}" for p in pods)
    return RemovePods(keys, where)


def _pod_label(data: Mapping[str, Any]) -> str:
    meta = data.get("metadata")
    if not isinstance(meta, Mapping):
        return "?"
    return f"{meta.get('namespace') or DEFAULT_NAMESPACE}/{meta.get('name', '?')}"


def _pod(data: Mapping[str, Any], where: str, notes: list[Problem]) -> PodSpec:
    meta = _mapping(data.get("metadata"), "metadata")
    name = _string(meta.get("name"), "metadata.name")
    namespace = _string(meta.get("namespace", DEFAULT_NAMESPACE), "metadata.namespace")
    spec = _mapping(data.get("spec"), "spec")
    if spec.get("resources") is not None:
        raise _Invalid("spec.resources", "pod-level resources are not simulated")
    containers: list[ContainerSpec] = []
    for field, default_role in (("initContainers", Role.INIT), ("containers", Role.APP)):
        items = spec.get(field) or []
        if not isinstance(items, list):
            raise _Invalid(f"spec.{field}", "expected a list")
        for i, item in enumerate(items):
            containers.append(_container(item, f"spec.{field}[{i}]", default_role, where, notes))
    if not any(c.role is Role.APP for c in containers):
        raise _Invalid("spec.containers", "a pod needs at least one container")
    names: set[str] = set()
    for c in containers:
        if c.name in names:
            raise _Invalid(f"{c.path}.name", f"duplicate container name {c.name!r}")
        names.add(c.name)
    uid = meta.get("uid") or str(uuid.uuid5(uuid.NAMESPACE_URL, f"nri-resmgr/{namespace}/{name}"))
    grace = spec.get("terminationGracePeriodSeconds", 30)
    status = data.get("status")
    qos = status.get("qosClass") if isinstance(status, Mapping) else None
    return PodSpec(
        namespace=namespace,
        name=name,
        uid=_string(uid, "metadata.uid"),
        labels=_string_map(meta.get("labels"), "metadata.labels"),
        annotations=_string_map(meta.get("annotations"), "metadata.annotations"),
        containers=tuple(containers),
        source=where,
        termination_grace=grace if isinstance(grace, int) else 30,
        reported_qos=qos if isinstance(qos, str) else None,
    )


def _container(data: Any, path: str, role: Role, where: str, notes: list[Problem]) -> ContainerSpec:
    item = _mapping(data, path)
    name = _string(item.get("name"), f"{path}.name")
    if role is Role.INIT and item.get("restartPolicy") == "Always":
        role = Role.SIDECAR
    resources = _mapping(item.get("resources") or {}, f"{path}.resources")
    requests = _amounts(resources.get("requests"), f"{path}.resources.requests", where, notes)
    limits = _amounts(resources.get("limits"), f"{path}.resources.limits", where, notes)
    # The API server's defaulting: a limit without a request is also the request.
    requests = Amounts(
        cpu=requests.cpu if requests.cpu is not None else limits.cpu,
        memory=requests.memory if requests.memory is not None else limits.memory,
    )
    for field in ("cpu", "memory"):
        request, limit = getattr(requests, field), getattr(limits, field)
        if request is not None and limit is not None and request > limit:
            raise _Invalid(
                f"{path}.resources.requests.{field}", f"must be less than or equal to {field} limit"
            )
    image = item.get("image", "")
    return ContainerSpec(
        name, role, path, requests, limits, image if isinstance(image, str) else ""
    )


def _amounts(data: Any, path: str, where: str, notes: list[Problem]) -> Amounts:
    values = _mapping(data or {}, path)
    cpu = memory = None
    for key, value in values.items():
        try:
            if key == "cpu":
                cpu = cpu_milli(value)
            elif key == "memory":
                memory = memory_bytes(value)
        except QuantityError as exc:
            raise _Invalid(f"{path}.{key}", str(exc)) from None
        if str(key).startswith(_NOT_SIMULATED_PREFIXES):
            notes.append(Problem(where, f"{path}.{key}: not carried by the simulation"))
    return Amounts(cpu, memory)


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _Invalid(path, f"expected a mapping, got {_kind(value)}")
    return value


def _string(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise _Invalid(path, f"expected a non-empty string, got {_kind(value)}")
    return value


def _string_map(value: Any, path: str) -> dict[str, str]:
    items = _mapping(value or {}, path)
    for key, v in items.items():
        if not isinstance(v, str):
            raise _Invalid(f"{path}.{key}", f"expected a string, got {_kind(v)} (quote it)")
    return dict(items)


def _kind(value: Any) -> str:
    return "nothing" if value is None else f"{type(value).__name__} {value!r}"
