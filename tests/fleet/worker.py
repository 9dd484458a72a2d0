"""A process hosting many fleet agents: ``python -m tests.fleet.worker`` (started by the harness).

The first line on stdin is the plan (JSON): API server URL, CA, one token per node, config
namespace, policy, host root. Then each line is a command, answered by one JSON line on
stdout:

- ``start``: starts every agent at once; answers at once.
- ``report``: the state of every agent, and this process' memory and CPU time.
- ``stop``: cancels the agents and exits.

Agents share nothing but the process: each has its own client, connections and state.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import sys
from typing import Any

import trio

from nri_resmgr.kube import ClusterConfig
from nri_resmgr.kube.auth import StaticToken
from tests.fleet.agent import FleetAgent


def process_usage() -> dict[str, float]:
    """Resident memory now and CPU seconds used so far, of this process."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    with open("/proc/self/statm") as statm:
        rss_pages = int(statm.read().split()[1])
    return {
        "rss_bytes": rss_pages * os.sysconf("SC_PAGE_SIZE"),
        "max_rss_bytes": usage.ru_maxrss * 1024,
        "cpu_seconds": usage.ru_utime + usage.ru_stime,
    }


def make_agents(plan: dict[str, Any]) -> list[FleetAgent]:
    agents = []
    for node, token in plan["nodes"].items():
        config = ClusterConfig(server=plan["server"], ca_pem=plan["ca_pem"].encode(),
                               token=StaticToken(token), namespace=plan["namespace"])  # fmt: skip
        agents.append(FleetAgent(config, node, plan["namespace"], plan["policy"],
                                 plan["host_root"]))  # fmt: skip
    return agents


async def serve(plan: dict[str, Any], commands: trio.abc.ReceiveStream) -> None:
    agents = make_agents(plan)
    reply({"agents": len(agents), **process_usage()})
    async with trio.open_nursery() as nursery:
        async for line in lines(commands):
            command = line.strip()
            if command == "start":
                for agent in agents:
                    nursery.start_soon(agent.run)
                reply({"started": len(agents)})
            elif command == "report":
                reply({"agents": [a.state() for a in agents], **process_usage()})
            elif command == "stop":
                break
            else:
                reply({"error": f"unknown command {command!r}"})
        nursery.cancel_scope.cancel()
    reply({"stopped": True})


async def lines(stream: trio.abc.ReceiveStream) -> Any:
    buffer = b""
    while True:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield line.decode()


def reply(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main() -> None:
    logging.basicConfig(level=os.environ.get("FLEET_LOG_LEVEL", "WARNING"), stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")  # fmt: skip
    plan = json.loads(sys.stdin.readline())
    trio.run(serve, plan, trio.lowlevel.FdStream(os.dup(sys.stdin.fileno())))


if __name__ == "__main__":
    main()
