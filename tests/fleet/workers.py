"""The worker processes, seen from the harness: start them, command them, read their agents."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import attrs


class WorkerFailed(RuntimeError):
    """A worker process died or answered something unexpected."""


class NotReached(TimeoutError):
    """A goal the agents did not all reach in time; ``reached`` of ``agents`` did."""

    def __init__(self, message: str, reached: int, agents: int) -> None:
        super().__init__(message)
        self.reached = reached
        self.agents = agents


@attrs.define
class Worker:
    proc: subprocess.Popen[str]
    log: Path

    @classmethod
    def spawn(cls, plan: dict[str, Any], log: Path) -> Worker:
        with log.open("a") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.fleet.worker"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                cwd=Path(__file__).resolve().parents[2], env=os.environ.copy(),
            )  # fmt: skip
        worker = cls(proc, log)
        worker.send(json.dumps(plan))
        return worker

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError as exc:
            raise WorkerFailed(f"worker exited: {self.tail()}") from exc

    def receive(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise WorkerFailed(f"worker exited with {self.proc.wait()}: {self.tail()}")
        message: dict[str, Any] = json.loads(line)
        return message

    def tail(self, lines: int = 20) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send("stop")
                self.proc.wait(timeout=30)
            except (WorkerFailed, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


@attrs.define
class Workers:
    workers: list[Worker]
    idle: list[dict[str, Any]] = attrs.field(factory=list)
    """Each worker's first answer: memory and CPU before any agent ran."""

    @classmethod
    def spawn(
        cls, plan: dict[str, Any], tokens: dict[str, str], processes: int, logdir: Path
    ) -> Workers:
        nodes = sorted(tokens)
        shares = [nodes[i::processes] for i in range(processes) if nodes[i::processes]]
        workers = []
        for i, share in enumerate(shares):
            own = {**plan, "nodes": {n: tokens[n] for n in share}}
            workers.append(Worker.spawn(own, logdir / f"worker-{i}.log"))
        group = cls(workers)
        group.idle = [w.receive() for w in workers]  # each has built its agents
        return group

    def start(self) -> None:
        for worker in self.workers:
            worker.send("start")
        for worker in self.workers:
            worker.receive()

    def report(self) -> list[dict[str, Any]]:
        for worker in self.workers:
            worker.send("report")
        return [worker.receive() for worker in self.workers]

    def agents(self) -> list[dict[str, Any]]:
        return [agent for report in self.report() for agent in report["agents"]]

    def wait_until(self, check: Any, timeout: float, poll: float = 0.5) -> float:
        """Seconds until ``check(agents)`` holds; raises TimeoutError with what is missing."""
        started = time.monotonic()
        while True:
            agents = self.agents()
            if check(agents):
                return time.monotonic() - started
            if time.monotonic() - started > timeout:
                errors = [a["error"] for a in agents if a["error"]][:5]
                reached = sum(check([a]) for a in agents)
                raise NotReached(f"{reached} of {len(agents)} agents after {timeout:.0f}s; "
                                 f"agent errors: {errors}", reached, len(agents))  # fmt: skip
            time.sleep(poll)

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()
