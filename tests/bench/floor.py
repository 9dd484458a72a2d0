"""The floor: a raw unix-socket ping-pong between this process and an echo process.

Two processes and two context switches per round trip, as between a runtime and its plugin,
with nothing else: no framing, no protobuf, no policy. The message is the size of a typical
CreateContainer request. Run ``python -m tests.bench.floor SOCKET`` to be the echo side.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MESSAGE = b"x" * 1024


def serve_echo(path: str) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen(1)
        print("ready", flush=True)
        conn, _ = listener.accept()
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)


class PingPong:
    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def samples(self, count: int) -> list[int]:
        out = []
        for _ in range(count):
            started = time.perf_counter_ns()
            self._sock.sendall(MESSAGE)
            got = 0
            while got < len(MESSAGE):
                got += len(self._sock.recv(65536))
            out.append(time.perf_counter_ns() - started)
        return out


@contextmanager
def echo_peer(workdir: Path) -> Iterator[PingPong]:
    path = workdir / "echo.sock"
    argv = [sys.executable, "-m", "tests.bench.floor", str(path)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the echo peer did not start")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(str(path))
            yield PingPong(sock)
    finally:
        proc.terminate()
        proc.wait(timeout=5)


if __name__ == "__main__":
    serve_echo(sys.argv[1])
