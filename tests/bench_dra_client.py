"""The kubelet side of ``tests.bench_dra``: a grpcio client in a process of its own, as kubelet
is. In the daemon's process it would hold the GIL the daemon needs (Python's 5 ms switch
interval then shows up in the server's figures) and its CPU time would count as the
server's.

``python -m tests.bench_dra_client STUBS_DIR N WARM_UP BATCH SOCKET [SOCKET ...]`` times N calls
of NodePrepareResources (v1, one claim each) per socket, each with ``perf_counter_ns`` around
the blocking call. Each socket first gets WARM_UP untimed calls; then the sockets take turns,
BATCH calls at a time, so that load from elsewhere on the machine hits every server alike.
It prints one JSON line: ``{"targets": [{"samples_ns": [...], "cpu_s": <client CPU seconds
of that socket's timed calls>}, ...]}``, in the order of the sockets.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from types import ModuleType
from typing import Any


class Target:
    """One server: its channel, and what its calls measured."""

    def __init__(self, grpc: ModuleType, pb2_grpc: ModuleType, socket: str) -> None:
        self.channel = grpc.insecure_channel(f"unix:{socket}")
        self.stub = pb2_grpc.DRAPluginStub(self.channel)
        self.samples_ns: list[int] = []
        self.cpu_s = 0.0
        self.calls = 0


def call(pb2: ModuleType, target: Target, *, timed: bool) -> None:
    i = target.calls
    target.calls += 1
    uid = f"00000000-0000-4000-8000-{i:012d}"  # tests.dra.fake_driver.numbered_uid
    claim = pb2.Claim(namespace="default", name=f"claim-{uid}", uid=uid)
    request = pb2.NodePrepareResourcesRequest(claims=[claim])
    start = time.perf_counter_ns()
    reply = target.stub.NodePrepareResources(request, timeout=10)
    elapsed = time.perf_counter_ns() - start
    if uid not in reply.claims or reply.claims[uid].error:
        raise SystemExit(f"call {i}: no answer for claim {uid}: {reply}")
    if timed:
        target.samples_ns.append(elapsed)


def main(argv: list[str]) -> None:
    stubs, n, warm_up, batch = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    sys.path.insert(0, stubs)
    import grpc  # only here: the stubs directory must be on the path first

    pb2 = importlib.import_module("kubelet.dra.v1.api_pb2")
    pb2_grpc = importlib.import_module("kubelet.dra.v1.api_pb2_grpc")
    targets = [Target(grpc, pb2_grpc, socket) for socket in argv[4:]]
    for target in targets:
        for _ in range(warm_up):
            call(pb2, target, timed=False)
    while any(len(t.samples_ns) < n for t in targets):
        for target in targets:
            cpu = time.process_time()
            for _ in range(min(batch, n - len(target.samples_ns))):
                call(pb2, target, timed=True)
            target.cpu_s += time.process_time() - cpu
    out: list[dict[str, Any]] = [{"samples_ns": t.samples_ns, "cpu_s": t.cpu_s} for t in targets]
    for target in targets:
        target.channel.close()
    print(json.dumps({"targets": out}))


if __name__ == "__main__":
    main(sys.argv[1:])
