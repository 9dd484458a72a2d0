"""``python -m tests.bench.lifecycle_loop [--live N] [--lifecycles K] [--measure WHAT]``:
instructions per container lifecycle of ours/topology-aware, in process, under callgrind.

Wall clock on a shared 2-CPU machine moves by tens of percent between runs; callgrind's
instruction counts do not. This drives the daemon's own NRI path without a socket: each
request is a ttrpc frame handed to ``TtrpcServer._accept`` (envelope decode, the manager
lock taken in place, the request observer of the metrics, the handler body and the policy,
the reply encode, the write to a sink that keeps nothing), bracketed as the mux brackets a batch
(``AfterReply.begin_batch``/``end_batch``: the deferred log line and a due collection).
The workload and configuration are the harness bench's (``tests.bench.workload``,
``contenders.TOPOLOGY_AWARE_CONFIG``), on this machine's sysfs unless ``--host-root``.

A lifecycle is CreateContainer, StartContainer, StopContainer, RemoveContainer (the post
events are not subscribed). Collection is on only inside a ctypes call (libc ``qsort_r``)
whose comparator runs the measured part (``--toggle-collect=ffi_call``), so start-up,
populating and ``--warmup`` lifecycles (first calls specialise the bytecode) cost nothing;
``--measure`` picks the part:

- ``lifecycle``: all of each sampled lifecycle, after-reply work included;
- ``create``: each CreateContainer up to its reply written (what the runtime waits for);
- ``after``: the after-reply work of each CreateContainer's batch (log line, collection);
- ``empty``: the ctypes call and callback frame alone, to subtract from ``create`` and ``after``;
- ``sync``: one Synchronize of ``--live`` running containers (the harness bench's: 5 to a
  pod, reporting no cpusets, so each is placed afresh) into a fresh policy: the request's
  decode, the policy's synchronize and the reply's encode (the manager lock and the ttrpc
  frame, a few thousand instructions, are left out: they need the trio scheduler);
  ``--lifecycles`` is the number of such policies, each measured once.

Without ``--inner`` the module runs itself under valgrind and prints the figures.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from nri_resmgr._gen import ttrpc as envelope
from nri_resmgr._gen.nri.pkg.api import v1alpha1 as api
from nri_resmgr.config.documents import load_document, parse_yaml
from nri_resmgr.instrumentation import RequestObserver
from nri_resmgr.log import FORMAT, AfterReplyHandler
from nri_resmgr.nri import afterreply, wire
from nri_resmgr.nri.handlers import PLUGIN_SERVICE, PluginHandlers
from nri_resmgr.nri.ttrpc import TtrpcServer
from nri_resmgr.nri.ttrpc_codec import MSG_REQUEST, Message
from nri_resmgr.policies import create_policy
from nri_resmgr.resmgr.manager import ResourceManager
from nri_resmgr.resmgr.policy import PolicyEnv
from tests.bench import workload
from tests.bench.contenders import TOPOLOGY_AWARE_CONFIG

MEASURES = ("lifecycle", "create", "after", "empty", "sync")
_CMP = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_LIBC = ctypes.CDLL(None)


def _measured(body: Callable[[], None]) -> None:
    """Run ``body`` inside a ctypes call (libc qsort_r of two elements: one comparator
    call), i.e. inside libffi's ``ffi_call``, the function callgrind collects in. Nothing
    else here calls through ctypes."""

    def compare(a: int | None, b: int | None, arg: int | None) -> int:
        body()
        return 0

    pair = (ctypes.c_int * 2)(0, 1)
    _LIBC.qsort_r(pair, 2, ctypes.sizeof(ctypes.c_int), _CMP(compare), None)


class _Sink:
    """A mux channel that takes every message whole, at once, and keeps nothing (the
    bench hands requests to ``TtrpcServer._accept`` itself: nothing is listened to)."""

    def __init__(self) -> None:
        self.written = 0

    async def send_message(self, header: bytes, body: bytes) -> None:
        self.written += len(header) + len(body)

    def send_message_nowait(self, header: bytes, body: bytes) -> None:
        self.written += len(header) + len(body)

    def listen(self, on_data: Callable[[bytes], int]) -> None:
        raise AssertionError("the bench feeds the server itself")

    async def wait_closed(self) -> None:
        raise AssertionError("the bench feeds the server itself")


class Loop:
    """The daemon's NRI server side over a sink, fed request frames one at a time."""

    def __init__(self, nursery: trio.Nursery, host_root: str) -> None:
        doc = load_document(parse_yaml(TOPOLOGY_AWARE_CONFIG))
        self.manager = ResourceManager(
            create_policy(doc.policy_name), doc.spec, PolicyEnv(host_root=host_root)
        )
        handlers = PluginHandlers(self.manager, lambda updates: None)
        self.sink = _Sink()
        self.server = TtrpcServer(self.sink, handlers.service(), RequestObserver("nri"))
        self.nursery = nursery
        self.after = afterreply.install()
        self._stream_id = 1

    def frame(self, method: str, request: Any) -> Message:
        body = envelope.Request(service=PLUGIN_SERVICE, method=method, payload=bytes(request))
        self._stream_id += 2
        return Message(self._stream_id, MSG_REQUEST, bytes(body))

    def send(self, msg: Message) -> None:
        """One request answered, and the after-reply work of its batch."""
        self.after.begin_batch()
        self.server._accept(self.nursery, msg)
        self.after.end_batch()


def _pod(n: int) -> api.PodSandbox:
    return api.PodSandbox().from_dict(workload.pod(n))


def _container(pod: dict[str, Any], n: int, state: str = "") -> api.Container:
    return api.Container().from_dict(workload.container(pod, n, state=state))


def _lifecycle_frames(loop: Loop, n: int, pods: int) -> list[Message]:
    pod_json = workload.pod(n % pods)
    pod = _pod(n % pods)
    created = _container(pod_json, n)
    running = _container(pod_json, n, "CONTAINER_RUNNING")
    stopped = _container(pod_json, n, "CONTAINER_STOPPED")
    return [
        loop.frame("CreateContainer", api.CreateContainerRequest(pod=pod, container=created)),
        loop.frame("StartContainer", api.StartContainerRequest(pod=pod, container=created)),
        loop.frame("StopContainer", api.StopContainerRequest(pod=pod, container=stopped)),
        loop.frame("RemoveContainer", api.RemoveContainerRequest(pod=pod, container=running)),
    ]


def _synchronize_payload(live: int) -> bytes:
    pods, containers = workload.existing_state(live)
    request = api.SynchronizeRequest(
        pods=[api.PodSandbox().from_dict(p) for p in pods],
        containers=[api.Container().from_dict(c) for c in containers],
    )
    return bytes(request)


def run_sync(live: int, policies: int, host_root: str) -> dict[str, Any]:
    """Each policy answers one Synchronize, as after a start; its set-up is not measured."""
    payload = _synchronize_payload(live)
    written = 0
    for _ in range(policies):
        doc = load_document(parse_yaml(TOPOLOGY_AWARE_CONFIG))
        policy = create_policy(doc.policy_name)
        policy.setup(doc.spec, PolicyEnv(host_root=host_root))
        replies: list[bytes] = []

        def answer() -> None:
            pods, containers, _ = wire.synchronize_request(payload)
            updates = policy.synchronize(pods, containers)  # noqa: B023 - called now
            replies.append(bytes(wire.updates_field(1, updates)))  # noqa: B023

        gc.collect()
        gc.freeze()
        _measured(answer)
        written += len(replies[0])
    return {"live": live, "lifecycles": policies, "measure": "sync", "bytes": written}


async def run_inner(
    live: int, lifecycles: int, measure: str, host_root: str, warmup: int
) -> dict[str, Any]:
    async with trio.open_nursery() as nursery:
        loop = Loop(nursery, host_root)
        gc.collect()
        gc.freeze()  # as the daemon does once started (app.freeze_startup_heap)
        pods = max(1, -(-live // workload.CONTAINERS_PER_POD))
        for p in range(pods):
            loop.send(loop.frame("RunPodSandbox", api.RunPodSandboxRequest(pod=_pod(p))))
        for n in range(live):
            create, start, _, _ = _lifecycle_frames(loop, n, pods)
            loop.send(create)
            loop.send(start)
        # Frames built before sampling: building them is the runtime's work, not ours.
        first = 1_000_000
        for i in range(warmup):
            for msg in _lifecycle_frames(loop, first - warmup + i, pods):
                loop.send(msg)
        frames = [_lifecycle_frames(loop, first + i, pods) for i in range(lifecycles)]
        if measure == "lifecycle":

            def all_of_them() -> None:
                for lifecycle in frames:
                    for msg in lifecycle:
                        loop.send(msg)

            _measured(all_of_them)
        else:
            for create, *rest in frames:
                _sample_create(loop, create, measure)
                for msg in rest:
                    loop.send(msg)
        nursery.cancel_scope.cancel()
    return {"live": live, "lifecycles": lifecycles, "measure": measure, "bytes": loop.sink.written}


def _sample_create(loop: Loop, create: Message, measure: str) -> None:
    after, server = loop.after, loop.server
    after.begin_batch()
    if measure == "create":
        _measured(lambda: server._accept(loop.nursery, create))
    else:
        server._accept(loop.nursery, create)
    if measure == "after":
        _measured(after.end_batch)
    else:
        if measure == "empty":
            _measured(lambda: None)
        after.end_batch()


def _log_to_devnull() -> None:
    """The daemon's handler and format at info, writing where nothing is kept."""
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    logging._srcfile = None
    handler = AfterReplyHandler(open(os.devnull, "w"))  # noqa: SIM115 - lives as the process
    handler.setFormatter(logging.Formatter(FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


def _outer(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="lifecycle-loop-") as tmp:
        out = Path(tmp) / "callgrind.out"
        argv = ["valgrind", "--tool=callgrind", "--collect-atstart=no",
                "--toggle-collect=ffi_call", f"--callgrind-out-file={out}",
                sys.executable, "-m", "tests.bench.lifecycle_loop", "--inner",
                "--live", str(args.live), "--lifecycles", str(args.lifecycles),
                "--measure", args.measure, "--host-root", args.host_root,
                "--warmup", str(args.warmup)]  # fmt: skip
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
        totals = re.search(r"^(?:totals|summary): (\d+)", out.read_text(), re.MULTILINE)
        assert totals is not None, done.stderr[-2000:]
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    instructions = int(totals.group(1))
    report["instructions"] = instructions
    report["per_sample"] = round(instructions / args.lifecycles)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--live", type=int, default=500)
    parser.add_argument("--lifecycles", type=int, default=200)
    parser.add_argument("--measure", choices=MEASURES, default="lifecycle")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--host-root", default="", help="sysfs root (default: this machine)")
    parser.add_argument("--inner", action="store_true", help="run the loop (under valgrind)")
    args = parser.parse_args()
    if args.inner and args.measure == "sync":
        _log_to_devnull()
        print(json.dumps(run_sync(args.live, args.lifecycles, args.host_root)))
    elif args.inner:
        _log_to_devnull()
        report = trio.run(
            run_inner, args.live, args.lifecycles, args.measure, args.host_root, args.warmup
        )
        print(json.dumps(report))
    else:
        print(json.dumps(_outer(args)))


if __name__ == "__main__":
    main()
