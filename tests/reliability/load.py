"""Mixed load for the shutdown test: NRI events on the simulator's plugin connection and
NodePrepareResources from grpcio, every request's outcome recorded.

An outcome is ``answered`` (a reply came back), ``closed`` (the connection went away or the
call was refused for shutdown), or anything else, which is a failure of the test: a hang
shows up as a deadline, an internal error as INTERNAL.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import grpc
import trio

from nri_resmgr._gen.nri.pkg.api import v1alpha1 as api
from nri_resmgr.nri.errors import ConnectionLost, RpcError
from nri_resmgr.nri.handlers import PLUGIN_SERVICE
from nri_resmgr.sim.connection import SimPlugin
from tests.dra.fake_driver import numbered_uid
from tests.dra.kubelet_client import KubeletStubs
from tests.reliability.soak import CTR_ID, POD_ID, TEMPLATES, UID

TIMEOUT = 30.0  # far above any answer time: a hang shows up as a deadline, not a stuck suite
CLOSED_CODES = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED}


@attrs.define
class NriOutcomes:
    answered: dict[str, bytes] = attrs.field(factory=dict)  # container id -> CreateContainer reply
    counts: Counter[str] = attrs.field(factory=Counter)
    other: list[str] = attrs.field(factory=list)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def _request(qos: str, event: str, n: int) -> bytes:
    payload = TEMPLATES[qos][event]
    ids = ((POD_ID, b"%016d" % n), (CTR_ID, b"c%015d" % n), (UID, b"u%015d" % n))
    for placeholder, real in ids:
        payload = payload.replace(placeholder, real)
    return payload


def container_id(n: int) -> str:
    return f"c{n:015d}"


async def nri_pod(plugin: SimPlugin, n: int, out: NriOutcomes, qos: str) -> None:
    """RunPodSandbox then CreateContainer for pod n (2 requests), outcomes recorded."""
    for event in ("RunPodSandbox", "CreateContainer"):
        try:
            reply = await plugin.client.call_raw(
                PLUGIN_SERVICE, event, _request(qos, event, n), TIMEOUT
            )
        except ConnectionLost:
            out.counts["closed"] += 1
            if event == "RunPodSandbox":
                out.counts["closed"] += 1  # its CreateContainer is never sent: also cut off
            return
        except RpcError as exc:
            out.counts["other"] += 1
            out.other.append(f"{event} {n}: {exc}")
            return
        out.counts["answered"] += 1
        if event == "CreateContainer":
            out.answered[container_id(n)] = reply


@attrs.define
class DraLoad:
    """``count`` NodePrepareResources calls in flight at once, as grpcio futures."""

    stubs: KubeletStubs
    socket: Path
    futures: list[Any] = attrs.field(factory=list)
    channel: Any = None

    def send(self, count: int) -> None:
        pb2 = self.stubs.dra["v1"].pb2
        self.channel = grpc.insecure_channel(f"unix:{self.socket}")
        stub = self.stubs.dra["v1"].grpc.DRAPluginStub(self.channel)
        for n in range(count):
            uid = numbered_uid(n)
            claim = pb2.Claim(namespace="default", name=f"claim-{uid}", uid=uid)
            request = pb2.NodePrepareResourcesRequest(claims=[claim])
            self.futures.append(stub.NodePrepareResources.future(request, timeout=TIMEOUT))

    def done(self) -> int:
        return sum(f.done() for f in self.futures)

    def outcomes(self) -> tuple[Counter[str], list[str]]:
        """Blocks until every call has ended (run it in a thread)."""
        counts: Counter[str] = Counter()
        other: list[str] = []
        for n, future in enumerate(self.futures):
            try:
                reply = future.result()
            except grpc.RpcError as exc:
                kind = "closed" if exc.code() in CLOSED_CODES else "other"
                counts[kind] += 1
                if kind == "other":
                    other.append(f"prepare {n}: {exc.code()} {exc.details()}")
                continue
            claim = reply.claims.get(numbered_uid(n))
            if claim is None or claim.error:
                counts["other"] += 1
                other.append(f"prepare {n}: bad answer {reply}")
            else:
                counts["answered"] += 1
        return counts, other

    def close(self) -> None:
        if self.channel is not None:
            self.channel.close()


async def poll(condition: Callable[[], bool]) -> None:
    while not condition():
        await trio.sleep(0.001)


def create_reply_cpus(reply: bytes) -> str:
    return str(api.CreateContainerResponse().parse(reply).adjust.linux.resources.cpu.cpus)
