"""The floors of ``tests.bench_dra``: trivial NodePrepareResources servers, each in a process
of its own, so nothing of ours runs beside them.

``python -m tests.bench_dra_floor KIND STUBS_DIR SOCKET`` serves the v1 DRA service on the unix
socket ``SOCKET`` and answers every claim with an empty ``NodePrepareResourceResponse`` (what
the template policy answers, so the reply is byte for byte the daemon's). ``KIND``:

* ``grpclib_asyncio``: grpclib with the betterproto service (the daemon's stack without trio,
  trio-asyncio, the gate or anything of ours) on a plain asyncio loop;
* ``grpcio``: grpcio's server with the stubs the client uses, the best any Python server does
  here.

It prints ``ready`` once it listens; then for each line on stdin it prints its CPU seconds so
far (the bench takes the difference around a run); it exits when stdin closes.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
import time
from concurrent import futures
from typing import Any

KINDS = ("grpclib_asyncio", "grpcio")


def _answer_cpu_lines() -> None:
    """Blocks: one CPU figure per line read, until stdin closes."""
    print("ready", flush=True)
    for _ in sys.stdin:
        print(time.process_time(), flush=True)


def serve_grpcio(stubs: str, socket: str) -> None:
    sys.path.insert(0, stubs)
    import grpc  # only here: the stubs directory must be on the path first

    pb2 = importlib.import_module("kubelet.dra.v1.api_pb2")
    pb2_grpc = importlib.import_module("kubelet.dra.v1.api_pb2_grpc")

    class Trivial(pb2_grpc.DRAPluginServicer):  # type: ignore[misc]
        def NodePrepareResources(self, request: Any, context: Any) -> Any:
            reply = pb2.NodePrepareResourcesResponse()
            for claim in request.claims:
                reply.claims[claim.uid].SetInParent()
            return reply

    # One worker: calls come one at a time, as from the bench's client.
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    pb2_grpc.add_DRAPluginServicer_to_server(Trivial(), server)
    if not server.add_insecure_port(f"unix:{socket}"):
        raise SystemExit(f"grpcio cannot listen on {socket}")
    server.start()
    try:
        _answer_cpu_lines()
    finally:
        server.stop(grace=None)


def serve_grpclib_asyncio(socket: str) -> None:
    from grpclib.server import Server

    from nri_resmgr._gen.k8s.io.kubelet.pkg.apis.dra import v1

    if "trio_asyncio" in sys.modules:  # it would make asyncio.run's loop its own
        raise SystemExit("the grpclib floor must run without trio_asyncio")

    class Trivial(v1.DraPluginBase):  # type: ignore[misc]
        async def node_prepare_resources(
            self, node_prepare_resources_request: v1.NodePrepareResourcesRequest
        ) -> v1.NodePrepareResourcesResponse:
            return v1.NodePrepareResourcesResponse(
                claims={
                    c.uid: v1.NodePrepareResourceResponse()
                    for c in node_prepare_resources_request.claims
                }
            )

    async def main() -> None:
        server = Server([Trivial()])
        await server.start(path=socket)
        # stdin on a thread of its own: the loop's thread runs nothing but grpclib.
        await asyncio.to_thread(_answer_cpu_lines)
        server.close()
        await server.wait_closed()

    asyncio.run(main())


def main(argv: list[str]) -> None:
    kind, stubs, socket = argv
    if kind == "grpcio":
        serve_grpcio(stubs, socket)
    elif kind == "grpclib_asyncio":
        serve_grpclib_asyncio(socket)
    else:
        raise SystemExit(f"unknown floor {kind!r}; one of {', '.join(KINDS)}")


if __name__ == "__main__":
    main(sys.argv[1:])
