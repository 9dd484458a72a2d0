"""Driver for ``kubelet-dra-peer``: kubelet's own plugin manager and DRA manager as a process.

The line protocol is the NRI harness's (one JSON command in, one reply out), so the
conformance driver's ``Harness`` carries it; this adds the peer's commands.
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from tests.conformance.peer import CALL_TIMEOUT, Harness, HarnessError
from tests.dra.kubeletbuild import BuildError, ensure_peer
from tests.kube.gobuild import KUBERNETES_VERSION
from tests.peers import missing_peer

JSON = dict[str, Any]


def peer_binary(version: str = KUBERNETES_VERSION) -> Path:
    """The peer built from kubelet ``version``; fails the test under CI when it cannot be
    built, skips it elsewhere (``tests/peers.py``)."""
    try:
        return ensure_peer(version)
    except BuildError as exc:
        missing_peer(f"kubelet-dra-peer {version} cannot be built here: {exc}")


class KubeletPeer(Harness):
    async def plugin(self, driver: str) -> JSON:
        return await self.call("plugin", driver=driver)

    async def wait_plugin(  # type: ignore[override]
        self, driver: str, *, present: bool = True, timeout: float = 30.0
    ) -> JSON:
        return await self.call("wait-plugin", driver=driver, present=present,
                               timeout_ms=int(timeout * 1000), timeout=timeout + 5)  # fmt: skip

    async def prepare(self, pod: JSON) -> JSON:
        return await self.call("prepare", pod=pod, timeout=60)

    async def unprepare(self, pod: JSON) -> JSON:
        return await self.call("unprepare", pod=pod, timeout=60)


@asynccontextmanager
async def kubelet_peer(
    binary: Path, *, kubeconfig: Path, node: str, registry: Path, state: Path, log: Path
) -> AsyncIterator[KubeletPeer]:
    """One kubelet: started, ready, and quit (then killed if need be) on the way out."""
    argv = [str(binary), f"-kubeconfig={kubeconfig}", f"-node={node}",
            f"-registry-dir={registry}", f"-state-dir={state}", "-v=4"]  # fmt: skip
    state.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = await trio.lowlevel.open_process(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=out
        )
    peer = KubeletPeer(proc, log, registry)
    try:
        with trio.fail_after(CALL_TIMEOUT):
            peer.info = await peer._read_reply()
        if peer.info.get("op") != "ready":
            raise HarnessError(f"kubelet peer did not start: {peer.info}\n{peer.log_tail()}")
        yield peer
    finally:
        with trio.CancelScope(shield=True):
            await peer.aclose()
