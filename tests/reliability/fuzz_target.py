"""The fuzz target: bytes as the plugin receives them from the NRI socket, decoded the way
the daemon decodes them (mux frames, ttrpc messages, the Request envelope and the hand-written
payload decoders of the hot path). The contract: nothing but ``ProtocolError`` (transport)
or ``WireError`` (payload, answered as an RPC error) may come out, whatever the bytes.

Purely random bytes die on the first mux header (a valid connection id is a 2-in-2^32 guess),
so inputs are *recipes*: ``trunk_from_recipe`` reads a byte string as a list of operations
(raw garbage, valid frames with random bodies, valid envelopes with random or mutated NRI
payloads, absurd length fields; see ``_OPS``) and builds the trunk from them. hypothesis,
atheris and the seeded random loop all drive the same interpreter.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Callable

import attrs

from nri_resmgr._gen import ttrpc as envelope
from nri_resmgr._gen.nri.pkg.api import v1alpha1 as api
from nri_resmgr.nri import wire
from nri_resmgr.nri.errors import ProtocolError
from nri_resmgr.nri.mux import PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN, FrameDecoder
from nri_resmgr.nri.mux import encode_frames as mux_frames
from nri_resmgr.nri.ttrpc_codec import MSG_REQUEST, MessageDecoder

EXPECTED = (ProtocolError, wire.WireError)
PLUGIN_SERVICE = "nri.pkg.api.v1alpha1.Plugin"
CHUNKS = (1, 3, 8, 10, 64, 4096, 65536)

_POD = api.PodSandbox(
    id="pod0", name="p", namespace="default", uid="u", labels={"a": "b"},
    annotations={"cpu.preserve.resource-policy.nri.io": "true"},
    linux=api.LinuxPodSandbox(cgroup_parent="kubepods-pod0.slice"),
)  # fmt: skip
_CTR = api.Container(
    id="ctr0", pod_sandbox_id="pod0", name="c", state=api.ContainerState.CONTAINER_RUNNING,
    linux=api.LinuxContainer(resources=api.LinuxResources(cpu=api.LinuxCpu(
        shares=api.OptionalUInt64(value=1024), quota=api.OptionalInt64(value=100000),
        period=api.OptionalUInt64(value=100000), cpus="0-3", mems="0"),
        memory=api.LinuxMemory(limit=api.OptionalInt64(value=1 << 30)))),
)  # fmt: skip
# method -> (valid payload to mutate, the decoder the daemon runs on it)
PAYLOADS: dict[str, tuple[bytes, Callable[[bytes], object]]] = {
    "Synchronize": (
        bytes(api.SynchronizeRequest(pods=[_POD], containers=[_CTR], more=True)),
        wire.synchronize_request,
    ),
    "RunPodSandbox": (bytes(api.RunPodSandboxRequest(pod=_POD)), wire.pod_request),
    "StopPodSandbox": (bytes(api.StopPodSandboxRequest(pod=_POD)), wire.pod_request),
    "CreateContainer": (
        bytes(api.CreateContainerRequest(pod=_POD, container=_CTR)),
        wire.pod_and_container,
    ),
    "RemoveContainer": (
        bytes(api.RemoveContainerRequest(pod=_POD, container=_CTR)),
        wire.pod_and_container,
    ),
}
METHODS = sorted(PAYLOADS)


class _Recipe:
    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def left(self) -> bool:
        return self._pos < len(self._data)

    def byte(self) -> int:
        if not self.left():
            return 0
        self._pos += 1
        return self._data[self._pos - 1]

    def u32(self) -> int:
        return int.from_bytes(bytes(self.byte() for _ in range(4)), "big")

    def take(self, n: int) -> bytes:
        out = self._data[self._pos : self._pos + n]
        self._pos += len(out)
        return out


def _ttrpc(stream_id: int, msg_type: int, body: bytes, announced: int | None = None) -> bytes:
    length = len(body) if announced is None else announced
    return struct.pack(">IIBB", length, stream_id, msg_type, 0) + body


def _request(method: str, payload: bytes, stream_id: int) -> bytes:
    req = envelope.Request(service=PLUGIN_SERVICE, method=method, payload=payload)
    return _ttrpc(stream_id | 1, MSG_REQUEST, bytes(req))


def _mutated(valid: bytes, r: _Recipe) -> bytes:
    out = bytearray(valid)
    for _ in range(1 + r.byte() % 4):
        if not out:
            break
        at = r.u32() % len(out)
        kind = r.byte() % 3
        if kind == 0:
            out[at] = r.byte()
        elif kind == 1:
            del out[at:]
        else:
            out[at:at] = r.take(1 + r.byte() % 8)
    return bytes(out)


# Operation codes, weighted towards inputs that get past the framing: an operation that breaks
# the framing ends the decoding, so garbage is rare and well-framed content is common.
_OPS = "GFFTTEEEMMMMMMLH"


def _operation(r: _Recipe) -> bytes:
    op = _OPS[r.byte() % len(_OPS)]
    conn = PLUGIN_SERVICE_CONN if r.byte() % 2 else RUNTIME_SERVICE_CONN
    if op == "G":  # raw garbage on the trunk
        return r.take(r.byte())
    if op == "F":  # a valid mux frame, random payload
        return mux_frames(conn, r.take(r.byte()))
    if op == "T":  # a valid ttrpc message of any type, random body
        body = r.take(r.byte())
        return mux_frames(conn, _ttrpc(r.u32(), r.byte() % 4, body))
    if op == "L":  # a mux header announcing any length
        return struct.pack(">II", conn, r.u32()) + r.take(r.byte())
    if op == "H":  # a ttrpc header announcing any length, inside a valid frame
        body = r.take(r.byte())
        return mux_frames(conn, _ttrpc(r.u32(), MSG_REQUEST, body, announced=r.u32()))
    method = METHODS[r.byte() % len(METHODS)]
    if op == "E":  # a valid envelope for a real method, random payload
        return mux_frames(PLUGIN_SERVICE_CONN, _request(method, r.take(r.byte()), r.u32()))
    # "M": a valid request whose payload is mutated
    valid, _ = PAYLOADS[method]
    return mux_frames(PLUGIN_SERVICE_CONN, _request(method, _mutated(valid, r), r.u32()))


def trunk_from_recipe(recipe: bytes) -> tuple[bytes, int]:
    """The trunk bytes a recipe describes, and the read size to deliver them in."""
    r = _Recipe(recipe)
    chunk = CHUNKS[r.byte() % len(CHUNKS)]
    out = bytearray()
    while r.left():
        out += _operation(r)
    return bytes(out), chunk


@attrs.define
class Depth:
    """How far inputs got: ttrpc messages decoded, NRI payloads handed to their decoder."""

    messages: int = 0
    payloads: int = 0


def decode_trunk(data: bytes, chunk: int, depth: Depth | None = None) -> None:
    """Decode ``data`` as the daemon's receive path does, counting progress in ``depth``.

    Raises only ``EXPECTED``; anything else escaping is a bug.
    """
    depth = depth or Depth()
    frames = FrameDecoder([PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN])
    streams = {PLUGIN_SERVICE_CONN: MessageDecoder(), RUNTIME_SERVICE_CONN: MessageDecoder()}
    for start in range(0, len(data), chunk):
        for conn, payload in frames.feed(data[start : start + chunk]):
            for msg in streams[conn].feed(payload):
                depth.messages += 1
                if msg.msg_type == MSG_REQUEST and conn == PLUGIN_SERVICE_CONN:
                    _decode_request(msg.data, depth)


def _decode_request(data: bytes, depth: Depth) -> None:
    _, method, payload, _ = wire.ttrpc_request(data)
    entry = PAYLOADS.get(method)
    if entry is not None:
        depth.payloads += 1
        entry[1](payload)


def one_input(recipe: bytes, depth: Depth | None = None) -> None:
    """The fuzz entry point: build, decode, allow only the expected errors."""
    data, chunk = trunk_from_recipe(recipe)
    with contextlib.suppress(*EXPECTED):
        decode_trunk(data, chunk, depth)
