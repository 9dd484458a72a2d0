"""The guest side of the test node: runs as the guest's only service (under tini, started by
``guest_init.sh``) and answers the host over a virtio-serial port, one JSON line per request
and per reply. Standard library only: it runs on the guest's own python3 before anything
else is installed.

Requests (``seq`` is echoed in the reply; ``error`` replaces the result when one fails):

- ``ping`` -> ``{}``
- ``run`` argv, [timeout s], [input], [env] -> ``rc``, ``out``, ``err``
- ``spawn`` argv, log, [env] -> ``pid`` (a background process, its output in ``log``)
- ``signal`` pid, sig; ``wait`` pid, timeout -> ``rc`` (null while it runs)
- ``read`` path -> ``data``; ``write`` path, data, [mode]
- ``placements`` pids (key -> pid) -> ``found``: key -> [cgroup, cpuset.cpus.effective,
  cpuset.mems.effective, Cpus_allowed_list, Mems_allowed_list]
- ``cri`` call, ... -> the call's reply (``guest_cri.py``; once the project's site-packages,
  which has grpclib, is installed at ``SITE``)
- ``poweroff``: no reply; the guest is gone.

No network is involved: the port is a character device that qemu connects to a unix
socket on the host.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

PORT_NAME = "nri-resmgr.agent"
SITE = "/opt/nri-resmgr/site"
CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
CRI: list[Any] = []  # the CRI client, made on first use
CRI_LOCK = threading.Lock()  # the CRI client is made once
WRITE_LOCK = threading.Lock()  # one reply line at a time


def find_port() -> str:
    for entry in Path("/sys/class/virtio-ports").iterdir():
        name = entry / "name"
        if name.exists() and name.read_text().strip() == PORT_NAME:
            return f"/dev/{entry.name}"
    raise SystemExit(f"agent: no virtio port named {PORT_NAME}")


def environment(extra: dict[str, str] | None) -> dict[str, str]:
    return {**os.environ, **(extra or {})}


def run(req: dict[str, Any]) -> dict[str, Any]:
    try:
        proc = subprocess.run(
            req["argv"],
            input=req.get("input"),
            capture_output=True,
            text=True,
            errors="replace",
            timeout=req.get("timeout"),
            env=environment(req.get("env")),
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        return {"rc": None, "out": str(e.stdout or ""), "err": f"timed out after {e.timeout}s"}
    except OSError as e:
        return {"rc": 127, "out": "", "err": str(e)}
    return {"rc": proc.returncode, "out": proc.stdout, "err": proc.stderr}


def spawn(req: dict[str, Any]) -> dict[str, Any]:
    log = open(req["log"], "ab")  # noqa: SIM115 - the child keeps it
    proc = subprocess.Popen(
        req["argv"],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=environment(req.get("env")),
        start_new_session=True,
    )
    log.close()
    CHILDREN[proc.pid] = proc
    return {"pid": proc.pid}


def wait(req: dict[str, Any]) -> dict[str, Any]:
    proc = CHILDREN.get(req["pid"])
    if proc is None:
        return {"error": f"pid {req['pid']} was not spawned by the agent"}
    deadline = time.monotonic() + float(req.get("timeout", 0))
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if proc.returncode is not None:
        CHILDREN.pop(proc.pid, None)
    return {"rc": proc.returncode}


def placement(pid: int) -> list[str]:
    """A process's cgroup, the cgroup's effective cpuset and mems, and the process's allowed
    CPUs and memory nodes: read here, with no process started."""
    cgroup = ""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            cgroup = line[3:]
    d = Path("/sys/fs/cgroup" + cgroup)
    status = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return [
        cgroup,
        (d / "cpuset.cpus.effective").read_text().strip(),
        (d / "cpuset.mems.effective").read_text().strip(),
        status["Cpus_allowed_list"].strip(),
        status["Mems_allowed_list"].strip(),
    ]


def handle(req: dict[str, Any]) -> dict[str, Any] | None:
    op = req.get("op")
    if op == "ping":
        return {}
    if op == "run":
        return run(req)
    if op == "spawn":
        return spawn(req)
    if op == "signal":
        os.kill(req["pid"], getattr(signal, req["sig"]))
        return {}
    if op == "wait":
        return wait(req)
    if op == "read":
        return {"data": Path(req["path"]).read_text(errors="replace")}
    if op == "write":
        path = Path(req["path"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(req["data"])
        path.chmod(int(req.get("mode", 0o644)))
        return {}
    if op == "cri":
        with CRI_LOCK:
            if not CRI:
                sys.path[:0] = [SITE, str(Path(__file__).parent)]
                import guest_cri  # type: ignore[import-not-found]

                CRI.append(guest_cri.Cri())
        result: dict[str, Any] = CRI[0].handle(req)
        return result
    if op == "placements":
        return {"found": {key: placement(pid) for key, pid in req["pids"].items()}}
    if op == "poweroff":
        os.sync()
        Path("/proc/sysrq-trigger").write_text("o")
        return None
    return {"error": f"unknown op {op!r}"}


def serve(port: str) -> None:
    fd = os.open(port, os.O_RDWR)
    reader = os.fdopen(fd, "rb", buffering=0)
    buf = b""
    while True:
        chunk = reader.read(65536)
        if not chunk:  # the host side is not connected: the port reads EOF until it is
            time.sleep(0.2)
            continue
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.strip():
                # A thread per request: a slow one (a CRI call waiting on a plugin) does not
                # keep the host from asking what is going on meanwhile.
                threading.Thread(target=reply, args=(fd, line), daemon=True).start()


def reply(fd: int, line: bytes) -> None:
    req: dict[str, Any] = {}
    try:
        req = json.loads(line)
        result = handle(req)
    except Exception as e:  # every failure goes back to the host, named
        result = {"error": f"{type(e).__name__}: {e}"}
    if result is None:
        return
    data = (json.dumps({**result, "seq": req.get("seq")}) + "\n").encode()
    with WRITE_LOCK:
        while data:
            data = data[os.write(fd, data) :]


if __name__ == "__main__":
    print("agent: serving", file=sys.stderr)
    serve(find_port())
