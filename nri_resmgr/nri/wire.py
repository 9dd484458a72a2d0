"""A hand-written protobuf codec for the hot NRI messages, straight to and from the model.

Profiling the daemon under ``nox -s bench`` showed betterproto's generic machinery taking
most of every CreateContainer round trip (it builds and tracks default sub-messages on each
attribute access). The requests the runtime sends per container event need only a handful
of fields, so this module reads exactly those from the wire into ``resmgr.model`` values and
writes the few replies by hand. Everything else (Configure, rare events, the runtime-side
client) stays on the generated classes, and tests check both codecs agree.

Field numbers are those of proto/nri/pkg/api/v1alpha1/api.proto and proto/ttrpc/ttrpc.proto.
Unknown fields are skipped, repeated sub-messages are merged as protobuf requires, and
malformed input raises ``WireError``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType

from nri_resmgr.errors import InvalidValue
from nri_resmgr.resmgr.model import (
    Adjustment,
    Container,
    ContainerState,
    DeviceNode,
    Pod,
    Resources,
    Update,
    claims_from_env,
    device_writable,
)

VARINT, FIXED64, LEN, FIXED32 = 0, 1, 2, 5
_STATES = {s.value: s for s in ContainerState}


class WireError(InvalidValue):
    """Bytes that are not a valid encoding of the expected message."""


# -- reading ----------------------------------------------------------------------------


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        try:
            b = buf[pos]
        except IndexError:
            raise WireError("truncated varint") from None
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise WireError("varint longer than 10 bytes")


def fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    """``(field number, value)`` for each field: ints for varints, bytes for the rest."""
    pos, end = 0, len(buf)
    while pos < end:
        key = buf[pos]
        if key < 0x80:
            pos += 1
        else:
            key, pos = _varint(buf, pos)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise WireError("field number 0")
        # One-byte varints (most lengths and values here) are read in place: a call per
        # field to _varint was a good part of decoding a request.
        if wire_type == VARINT:
            if pos < end and buf[pos] < 0x80:
                value = buf[pos]
                pos += 1
            else:
                value, pos = _varint(buf, pos)
            yield number, value
        elif wire_type == LEN:
            if pos < end and buf[pos] < 0x80:
                length = buf[pos]
                pos += 1
            else:
                length, pos = _varint(buf, pos)
            if pos + length > end:
                raise WireError(f"field {number}: {length} bytes announced, {end - pos} left")
            yield number, buf[pos : pos + length]
            pos += length
        elif wire_type in (FIXED64, FIXED32):
            size = 8 if wire_type == FIXED64 else 4
            if pos + size > end:
                raise WireError(f"field {number}: truncated fixed-size value")
            yield number, buf[pos : pos + size]
            pos += size
        else:
            raise WireError(f"field {number}: unsupported wire type {wire_type}")


_AS_VARINT = "expected a length-delimited value, got a varint"


def _bytes(value: int | bytes, number: int) -> bytes:
    if isinstance(value, int):
        raise WireError(f"field {number}: {_AS_VARINT}")
    return value


def _int(value: int | bytes, number: int) -> int:
    if not isinstance(value, int):
        raise WireError(f"field {number}: expected a varint")
    return value


def _text(value: int | bytes, number: int) -> str:
    # EAFP: an int has no decode(); one call per string instead of two (thousands per sync).
    try:
        return value.decode()  # type: ignore[union-attr]
    except AttributeError:
        raise WireError(f"field {number}: {_AS_VARINT}") from None
    except UnicodeDecodeError as exc:
        raise WireError(f"field {number}: invalid UTF-8") from exc


def _int64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _map_entry(buf: bytes, into: dict[str, str]) -> None:
    key = val = ""
    for number, value in fields(buf):
        if number == 1:
            key = _text(value, 1)
        elif number == 2:
            val = _text(value, 2)
    into[key] = val


def _wrapped(buf: bytes, signed: bool) -> int:
    """The ``value`` of an OptionalInt64/OptionalUInt64."""
    out = 0
    for number, value in fields(buf):
        if number == 1:
            out = _int(value, 1) & ((1 << 64) - 1)
    return _int64(out) if signed else out


def _sub(parts: dict[int, list[bytes]], number: int, value: int | bytes) -> None:
    """Collect a sub-message; repeated occurrences merge, which concatenation does.

    The pieces are joined once by ``_joined``: concatenating as they come copies everything
    so far for every piece, quadratic in a message that repeats a field many times.
    """
    parts.setdefault(number, []).append(_bytes(value, number))


def _joined(parts: dict[int, list[bytes]], number: int) -> bytes:
    return b"".join(parts.get(number, ()))


_NO_RESOURCES = Resources()
"""What an empty LinuxResources reads as: frozen, so one serves every container sent one."""

_NO_STRINGS: Mapping[str, str] = MappingProxyType({})


_KEPT_ENCODING_MAX = 16 << 10
"""Longer encodings (a pod with a kubectl last-applied-configuration annotation, say) are
decoded each time: what stays kept is then at most a few MiB, whatever the pods carry."""


def resources(buf: bytes) -> Resources:
    """A LinuxResources message that was present on the wire."""
    if not buf:
        return _NO_RESOURCES
    if len(buf) > _KEPT_ENCODING_MAX:
        return _resources(buf)
    return _kept_resources(buf)


def _resources(buf: bytes) -> Resources:
    memory_limit = None
    cpu: list[int | str | None] = [None] * 5  # shares, quota, period, cpus, mems
    for number, value in fields(buf):
        if number == 1:
            for n, v in fields(_bytes(value, 1)):
                if n == 1:
                    memory_limit = _wrapped(_bytes(v, 1), signed=True)
        elif number == 2:
            _cpu(_bytes(value, 2), cpu)
    shares, quota, period, cpus, mems = cpu
    return Resources(shares, quota, period, cpus or None, mems or None, memory_limit)  # type: ignore[arg-type]


def _cpu(buf: bytes, out: list[int | str | None]) -> None:
    for number, value in fields(buf):
        if number == 1:
            out[0] = _wrapped(_bytes(value, 1), signed=False)
        elif number == 2:
            out[1] = _wrapped(_bytes(value, 2), signed=True)
        elif number == 3:
            out[2] = _wrapped(_bytes(value, 3), signed=False)
        elif number == 6:
            out[3] = _text(value, 6)
        elif number == 7:
            out[4] = _text(value, 7)


def pod(buf: bytes) -> Pod:
    """A PodSandbox (an absent one reads as all-empty, as in the generated classes); its
    labels and annotations are read-only, since one decoding serves every event of the pod."""
    if len(buf) > _KEPT_ENCODING_MAX:
        return _pod(buf)
    return _kept_pod(buf)


def _pod(buf: bytes) -> Pod:
    # Locals and positional construction, not a dict of fields: a Synchronize decodes
    # hundreds of pods and thousands of containers in one request.
    pid = name = uid = namespace = cgroup_parent = ""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    res_parts: list[bytes] = []
    for number, value in fields(buf):
        if number == 1:
            pid = _text(value, 1)
        elif number == 2:
            name = _text(value, 2)
        elif number == 3:
            uid = _text(value, 3)
        elif number == 4:
            namespace = _text(value, 4)
        elif number == 5:
            _map_entry(_bytes(value, 5), labels)
        elif number == 6:
            _map_entry(_bytes(value, 6), annotations)
        elif number == 8:
            for n, v in fields(_bytes(value, 8)):
                if n == 3:
                    cgroup_parent = _text(v, 3)
                elif n == 2:
                    res_parts.append(_bytes(v, 2))
    res = resources(b"".join(res_parts)) if res_parts else None
    return Pod(
        pid,
        name,
        namespace,
        uid,
        MappingProxyType(labels) if labels else _NO_STRINGS,
        MappingProxyType(annotations) if annotations else _NO_STRINGS,
        cgroup_parent,
        res,
    )


# The runtime sends the same pod with every event of each of its containers, and many
# containers the same resources; the values are immutable, so one decoding serves them all.
# (A malformed encoding raises, and lru_cache keeps no exception.)
_kept_pod = functools.lru_cache(maxsize=256)(_pod)
_kept_resources = functools.lru_cache(maxsize=256)(_resources)


def container(buf: bytes) -> Container:
    """A Container (an absent one reads as all-empty, as in the generated classes)."""
    cid = pod_id = name = ""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    state = pid = 0
    res_parts: list[bytes] = []
    oom_score_adj: int | None = None
    env: list[str] = []
    cdi_devices: list[str] = []
    device_bufs: list[bytes] = []
    for number, value in fields(buf):
        if number == 1:
            cid = _text(value, 1)
        elif number == 2:
            pod_id = _text(value, 2)
        elif number == 3:
            name = _text(value, 3)
        elif number == 4:
            state = _int(value, 4)
        elif number == 11:
            for n, v in fields(_bytes(value, 11)):
                if n == 3:
                    res_parts.append(_bytes(v, 3))
                elif n == 4:  # oom_score_adj, an OptionalInt (int64 value)
                    oom_score_adj = _wrapped(_bytes(v, 4), signed=True)
                elif n == 2:  # devices: LinuxDevice, rare (device plugins, privileged)
                    device_bufs.append(_bytes(v, 2))
        elif number == 8:  # env: what identifies a DRA claim's containers
            env.append(_text(value, 8))
        elif number == 20:  # CDI_devices (CDIDevice.name is its field 1)
            cdi_devices.append(_cdi_device_name(_bytes(value, 20)))
        elif number == 5:
            _map_entry(_bytes(value, 5), labels)
        elif number == 6:
            _map_entry(_bytes(value, 6), annotations)
        elif number == 12:
            pid = _int(value, 12) & 0xFFFFFFFF
    res = b"".join(res_parts)
    claims, keys = claims_from_env(env) if env else ({}, {})
    return Container(
        cid,
        pod_id,
        name,
        _STATES.get(state, ContainerState.UNKNOWN),
        labels,
        annotations,
        resources(res) if res_parts else None,
        pid,
        claims,
        keys,
        tuple(cdi_devices),
        _device_nodes(device_bufs, res) if device_bufs else (),
        oom_score_adj,
    )


def _device_nodes(device_bufs: list[bytes], res: bytes) -> tuple[DeviceNode, ...]:
    """The LinuxDevices (type=2, major=3, minor=4), each writable or not by the device cgroup
    rules: LinuxResources field 7, LinuxDeviceCgroup type=2, major/minor=3/4 OptionalInt64,
    access=5."""
    rules = [_device_rule(_bytes(v, 7)) for n, v in fields(res) if n == 7]
    out = []
    for buf in device_bufs:
        kind, ids = "", {3: 0, 4: 0}
        for n, v in fields(buf):
            if n == 2:
                kind = _text(v, 2)
            elif n in ids:
                ids[n] = _int64(_int(v, n))
        key = (kind, ids[3], ids[4])
        out.append(DeviceNode(kind, ids[3], ids[4], writable=device_writable(key, rules)))
    return tuple(out)


def _device_rule(buf: bytes) -> tuple[str, int, int, str]:
    kind, access, ids = "", "", {3: 0, 4: 0}
    for n, v in fields(buf):
        if n == 2:
            kind = _text(v, 2)
        elif n == 5:
            access = _text(v, 5)
        elif n in ids:
            ids[n] = _wrapped(_bytes(v, n), signed=True)
    return kind, ids[3], ids[4], access


def _cdi_device_name(buf: bytes) -> str:
    name = ""
    for number, value in fields(buf):
        if number == 1:
            name = _text(value, 1)
    return name


def pod_and_container(buf: bytes, pod_field: int = 1, ctr_field: int = 2) -> tuple[Pod, Container]:
    """The ``pod`` and ``container`` of a container event request."""
    parts: dict[int, list[bytes]] = {}
    for number, value in fields(buf):
        if number in (pod_field, ctr_field):
            _sub(parts, number, value)
    return pod(_joined(parts, pod_field)), container(_joined(parts, ctr_field))


def pod_request(buf: bytes) -> Pod:
    """The ``pod`` (field 1) of a pod event request."""
    parts: dict[int, list[bytes]] = {}
    for number, value in fields(buf):
        if number == 1:
            _sub(parts, 1, value)
    return pod(_joined(parts, 1))


def synchronize_request(buf: bytes) -> tuple[list[Pod], list[Container], bool]:
    pods: list[Pod] = []
    containers: list[Container] = []
    more = False
    for number, value in fields(buf):
        if number == 1:
            pods.append(pod(_bytes(value, 1)))
        elif number == 2:
            containers.append(container(_bytes(value, 2)))
        elif number == 3:
            more = bool(_int(value, 3))
    return pods, containers, more


def ttrpc_request(buf: bytes) -> tuple[str, str, bytes, int]:
    """``(service, method, payload, timeout_nano)`` of a ttrpc Request envelope."""
    service = method = ""
    payload = b""
    timeout = 0
    for number, value in fields(buf):
        if number == 1:
            service = _text(value, 1)
        elif number == 2:
            method = _text(value, 2)
        elif number == 3:
            payload = _bytes(value, 3)
        elif number == 4:
            timeout = _int64(_int(value, 4))
    return service, method, payload, timeout


# -- writing ----------------------------------------------------------------------------


def _put_varint(out: bytearray, value: int) -> None:
    value &= (1 << 64) - 1  # negative int64s go out as ten-byte two's complement
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _put_len(out: bytearray, number: int, data: bytes | bytearray) -> None:
    _put_varint(out, number << 3 | LEN)
    _put_varint(out, len(data))
    out += data


def _put_text(out: bytearray, number: int, text: str | None) -> None:
    if text:
        _put_len(out, number, text.encode())


def _wrapper(value: int) -> bytes:
    out = bytearray()
    if value:
        out.append(1 << 3 | VARINT)
        _put_varint(out, value)
    return bytes(out)


def _resources_bytes(res: Resources | Adjustment) -> bytes:
    """LinuxResources with only the set fields: an absent wrapper means "unchanged"."""
    cpu = bytearray()
    for number, value in ((1, res.cpu_shares), (2, res.cpu_quota), (3, res.cpu_period)):
        if value is not None:
            _put_len(cpu, number, _wrapper(value))
    _put_text(cpu, 6, res.cpuset_cpus)
    _put_text(cpu, 7, res.cpuset_mems)
    out = bytearray()
    if res.memory_limit is not None:
        memory = bytearray()
        _put_len(memory, 1, _wrapper(res.memory_limit))
        _put_len(out, 1, memory)
    # The CPU message always goes out, empty when nothing is set, as the generated code
    # writes it; an empty LinuxCPU changes nothing on the runtime side.
    _put_len(out, 2, cpu)
    return bytes(out)


def _update_bytes(update: Update, linux_field: bytes) -> bytes:
    """A ContainerUpdate whose field 2 (``_linux_field``) is already encoded."""
    out = bytearray()
    _put_text(out, 1, update.container_id)
    out += linux_field
    if update.ignore_failure:
        out += b"\x18\x01"
    return bytes(out)


@functools.lru_cache(maxsize=512)
def _linux_field(adjustment: Adjustment) -> bytes:
    """A ContainerUpdate's field 2, its LinuxContainerUpdate; cached, because a policy moves
    many containers to the same cpusets at once (a Synchronize of 1,000 shared containers
    sends one adjustment)."""
    linux = bytearray()
    _put_len(linux, 1, _resources_bytes(adjustment))
    out = bytearray()
    _put_len(out, 2, linux)
    return bytes(out)


def updates_field(number: int, updates: Sequence[Update]) -> bytearray:
    """A repeated ContainerUpdate field."""
    out = bytearray()
    last: Adjustment | None = None
    linux = b""
    for update in updates:
        if update.adjustment is not last:
            # Consecutive updates mostly share one Adjustment object (a pool's containers
            # move together): hashed for the cache once per run, not once per update.
            last = update.adjustment
            linux = _linux_field(last)
        _put_len(out, number, _update_bytes(update, linux))
    return out


@functools.lru_cache(maxsize=512)
def _adjust_field(adjustment: Adjustment) -> bytes:
    """A CreateContainerResponse's field 1, its ContainerAdjustment (only ``linux``, field 6,
    with its ``resources``, field 2); cached, because a pool's containers are all sent the
    same cpusets and shares: one encoding per distinct adjustment, not per create."""
    if adjustment.is_empty():
        return b""
    linux = bytearray()
    _put_len(linux, 2, _resources_bytes(adjustment))
    adjust = bytearray()
    _put_len(adjust, 6, linux)
    out = bytearray()
    _put_len(out, 1, adjust)
    return bytes(out)


def create_container_response(adjustment: Adjustment, updates: Sequence[Update]) -> bytes:
    if not updates:
        return _adjust_field(adjustment)
    return _adjust_field(adjustment) + updates_field(2, updates)


def ttrpc_response(payload: bytes) -> bytes:
    out = bytearray()
    if payload:
        _put_len(out, 2, payload)
    return bytes(out)
