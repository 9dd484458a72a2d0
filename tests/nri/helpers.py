"""Helpers of the NRI tests and benchmark: a real ResourceManager with a tiny policy, and
muxes on socket pairs (the transport's one path) with a raw peer for either end."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import trio

from nri_resmgr._gen.nri.pkg.api import v1alpha1 as api
from nri_resmgr.backoff import Backoff
from nri_resmgr.config.models import TemplateSpec
from nri_resmgr.nri.errors import ConnectionLost, ProtocolError
from nri_resmgr.nri.mux import Mux, MuxChannel
from nri_resmgr.nri.service import NriService
from nri_resmgr.nri.ttrpc_codec import Message, MessageDecoder
from nri_resmgr.policies.template import TemplatePolicy
from nri_resmgr.resmgr.manager import ResourceManager
from nri_resmgr.resmgr.model import Adjustment, Container, Pod, Update
from nri_resmgr.resmgr.policy import PolicyEnv


class PinningPolicy(TemplatePolicy):
    """Pins every container to CPUs 0-1 and remembers what it was told: the pods and
    containers it knows of (``pods``, ``containers``), as a policy would learn them."""

    name = "test-pinning"

    def __init__(self) -> None:
        super().__init__()
        self.synced: list[tuple[int, int]] = []
        self.removed: list[str] = []
        self.pods: dict[str, Pod] = {}
        self.containers: dict[str, Container] = {}

    def synchronize(self, pods: Sequence[Pod], containers: Sequence[Container]) -> list[Update]:
        self.synced.append((len(pods), len(containers)))
        self.pods = {p.id: p for p in pods}
        self.containers = {c.id: c for c in containers}
        return [Update(c.id, Adjustment(cpuset_cpus="0-1")) for c in containers]

    def run_pod_sandbox(self, pod: Pod) -> None:
        self.pods[pod.id] = pod

    def create_container(self, pod: Pod, container: Container) -> tuple[Adjustment, list[Update]]:
        self.containers[container.id] = container
        return Adjustment(cpuset_cpus="0-1", cpuset_mems="0", cpu_shares=512), []

    def remove_container(self, pod: Pod, container: Container) -> list[Update]:
        self.removed.append(container.id)
        self.containers.pop(container.id, None)
        return [Update("survivor", Adjustment(cpuset_cpus="0-3"))]


class WantingPolicy(PinningPolicy):
    """Wants ``wanted[id]`` CPUs for a container (what ``retry_updates`` re-sends) and
    records the containers whose updates failed."""

    def __init__(self) -> None:
        super().__init__()
        self.wanted: dict[str, str] = {}
        self.failed: list[str] = []
        self.told = trio.Event()
        """Set at the first failure reported."""

    def updates_failed(self, container_ids: Sequence[str]) -> None:
        self.failed.extend(container_ids)
        self.told.set()

    def retry_updates(self, container_ids: Sequence[str]) -> list[Update]:
        return [
            Update(cid, Adjustment(cpuset_cpus=self.wanted[cid]))
            for cid in container_ids
            if cid in self.wanted
        ]


def make_manager(policy: TemplatePolicy | None = None) -> ResourceManager:
    return ResourceManager(policy or PinningPolicy(), TemplateSpec(), PolicyEnv())


def fast_backoff() -> Backoff:
    return Backoff(initial=0.01, maximum=0.05)


@asynccontextmanager
async def running_service(manager: ResourceManager, path: str) -> AsyncIterator[NriService]:
    service = NriService(manager, path, "resmgr", "90", env={}, backoff=fast_backoff())
    async with trio.open_nursery() as nursery:
        await nursery.start(service.serve)
        yield service
        await service.stop()


def pod(n: int = 0) -> api.PodSandbox:
    return api.PodSandbox(id=f"pod{n}", name=f"pod-{n}", namespace="default", uid=f"uid-{n}")


def container(n: int, pod_n: int = 0) -> api.Container:
    return api.Container(id=f"ctr{n}", pod_sandbox_id=f"pod{pod_n}", name=f"c{n}")


def socket_pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    a, b = trio.socket.socketpair()
    return trio.SocketStream(a), trio.SocketStream(b)


class MuxPair:
    """Two muxes on the ends of a socket pair; ``ended`` holds what each reader raised."""

    def __init__(self) -> None:
        a, b = socket_pair()
        self.ours, self.theirs = Mux(a), Mux(b)
        self.ended: dict[Mux, Exception] = {}

    async def read_until_it_ends(self, mux: Mux) -> None:
        try:
            await mux.run()
        except (ConnectionLost, ProtocolError) as exc:
            self.ended[mux] = exc


@asynccontextmanager
async def mux_pair() -> AsyncIterator[MuxPair]:
    """Two muxes on the ends of a socket pair, both reading their trunk until it ends
    (quietly: tests look at ``ended``, the channels and what ttrpc saw); closed on exit."""
    pair = MuxPair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pair.read_until_it_ends, pair.ours)
        nursery.start_soon(pair.read_until_it_ends, pair.theirs)
        yield pair
        await pair.ours.aclose()
        await pair.theirs.aclose()


class RawPeer:
    """One end of a mux connection, by hand: reads whole ttrpc messages, writes raw bytes."""

    def __init__(self, channel: MuxChannel) -> None:
        self.channel = channel
        self._decoder = MessageDecoder()
        self._in, self._out = trio.open_memory_channel[Message](math.inf)
        channel.listen(self._on_data)

    def _on_data(self, data: bytes) -> int:
        for msg in self._decoder.feed(data):
            self._in.send_nowait(msg)
        return self._decoder.pending()

    async def message(self) -> Message:
        """The next whole message that arrived."""
        return await self._out.receive()

    async def send_all(self, data: bytes) -> None:
        await self.channel.send_all(data)
