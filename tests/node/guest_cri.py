"""CRI calls from inside the guest, for the agent (``agent.py``, op ``cri``): one grpclib
channel to containerd kept open, requests and replies as plain JSON-able dicts.

Why not crictl: under TCG each crictl process costs one to several seconds of Go start-up,
three of them per container (create, start, inspect); here a container costs the CRI calls
themselves. Runs on the guest's python3 with the project's site-packages on the path
(grpclib, betterproto) and ``cri_api.py`` beside it in the share.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import betterproto
import cri_api as api  # type: ignore[import-not-found]
from grpclib.client import Channel

SOCKET = "/run/containerd/containerd.sock"
TIMEOUT = 600.0  # a bound against a hang under TCG, not a measure


class Stub(betterproto.ServiceStub):
    async def call(self, method: str, request: Any, reply: type[Any]) -> Any:
        return await self._unary_unary(api.SERVICE + method, request, reply, timeout=TIMEOUT)


class Cri:
    """Thread-safe: the event loop runs in a thread of its own, each call is submitted to
    it, so that the agent's request threads can have several calls in flight (the node's
    control-plane pods are made concurrently)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True, name="cri").start()
        self.channel = asyncio.run_coroutine_threadsafe(self._open(), self.loop).result()

    async def _open(self) -> Channel:
        return Channel(path=SOCKET)

    def _call(self, method: str, request: Any, reply: type[Any] = api.Empty) -> Any:
        call = Stub(self.channel).call(method, request, reply)
        return asyncio.run_coroutine_threadsafe(call, self.loop).result()

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        call = req["call"]
        if call == "version":
            reply = self._call("Version", api.VersionRequest(), api.VersionResponse)
            return {"runtime": reply.runtime_name, "version": reply.runtime_version}
        if call == "run_pod":
            config = api.PodSandboxConfig().from_dict(req["config"])
            reply = self._call("RunPodSandbox", api.RunPodSandboxRequest(config), api.IdReply)
            return {"id": reply.id}
        if call == "start_container":
            return self.start_container(req)
        if call == "stop_container":
            self._call("StopContainer", api.ContainerId(req["id"], req.get("timeout", 0)))
            return {}
        if call == "remove_container":
            self._call("RemoveContainer", api.ContainerId(req["id"]))
            return {}
        if call == "remove_pod":
            self._call("StopPodSandbox", api.ContainerId(req["id"]))
            self._call("RemovePodSandbox", api.ContainerId(req["id"]))
            return {}
        if call == "status":
            return self.status(req["id"])
        if call == "pods":
            found = self._call("ListPodSandbox", api.ListPodSandboxRequest(),
                               api.ListPodSandboxResponse)  # fmt: skip
            return {"pods": [{"id": p.id, "name": p.metadata.name, "state": p.state,
                              "namespace": p.metadata.namespace} for p in found.items]}  # fmt: skip
        if call == "containers":
            found = self._call("ListContainers", api.ListContainersRequest(),
                               api.ListContainersResponse)  # fmt: skip
            return {"containers": [_container(c) for c in found.containers]}
        raise ValueError(f"unknown CRI call {call!r}")

    def start_container(self, req: dict[str, Any]) -> dict[str, Any]:
        """Create and start; the container counts as created once it runs, with its PID."""
        create = api.CreateContainerRequest(
            req["pod_id"],
            api.ContainerConfig().from_dict(req["config"]),
            api.PodSandboxConfig().from_dict(req["sandbox_config"]),
        )
        cid = self._call("CreateContainer", create, api.IdReply).id
        self._call("StartContainer", api.ContainerId(cid))
        return {"id": cid, **self.status(cid)}

    def status(self, cid: str) -> dict[str, Any]:
        reply = self._call("ContainerStatus", api.ContainerStatusRequest(cid, True),
                           api.ContainerStatusResponse)  # fmt: skip
        info = json.loads(reply.info.get("info", "{}"))
        return {"state": reply.status.state, "pid": int(info.get("pid", 0))}


def _container(c: Any) -> dict[str, Any]:
    return {"id": c.id, "pod_id": c.pod_sandbox_id, "state": c.state, "name": c.metadata.name}
