"""The kubelet side of ``tests.bench_dra``: a grpcio client in a process of its own, as kubelet
is. In the daemon's process it would hold the GIL the daemon needs (Python's 5 ms switch
interval then shows up in the server's figures) and its CPU time would count as the
server's.

``python -m tests.bench_dra_client STUBS_DIR SOCKET N WARM_UP [v1|v1beta1]`` times N calls of
NodePrepareResources (one claim each, after WARM_UP untimed ones), each with
``perf_counter_ns`` around the blocking call, and prints one JSON line:
``{"samples_ns": [...], "cpu_s": <client CPU seconds>}``.
"""

from __future__ import annotations

import importlib
import json
import sys
import time


def main(argv: list[str]) -> None:
    stubs, socket, n, warm_up = argv[0], argv[1], int(argv[2]), int(argv[3])
    version = argv[4] if len(argv) > 4 else "v1"
    sys.path.insert(0, stubs)
    import grpc  # only here: the stubs directory must be on the path first

    pb2 = importlib.import_module(f"kubelet.dra.{version}.api_pb2")
    pb2_grpc = importlib.import_module(f"kubelet.dra.{version}.api_pb2_grpc")
    samples: list[int] = []
    cpu = time.process_time()
    with grpc.insecure_channel(f"unix:{socket}") as channel:
        stub = pb2_grpc.DRAPluginStub(channel)
        for i in range(warm_up + n):
            claim = pb2.Claim(namespace="default", name=f"c{i}", uid=f"uid-{i}")
            request = pb2.NodePrepareResourcesRequest(claims=[claim])
            start = time.perf_counter_ns()
            reply = stub.NodePrepareResources(request, timeout=10)
            elapsed = time.perf_counter_ns() - start
            if f"uid-{i}" not in reply.claims:
                raise SystemExit(f"call {i}: no answer for claim uid-{i}: {reply}")
            if i >= warm_up:
                samples.append(elapsed)
    print(json.dumps({"samples_ns": samples, "cpu_s": time.process_time() - cpu}))


if __name__ == "__main__":
    main(sys.argv[1:])
