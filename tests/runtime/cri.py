"""Pods and containers through CRI (crictl) as kubelet would create them, and what the kernel
applied to them.

kubelet with the cgroupfs driver puts a pod under ``<root>/kubepods[/burstable|/besteffort]/
pod<uid>`` and gives each container shares, quota and a memory limit from its resources; the
runtime's NRI adaptation hands exactly that to the plugin, which infers the QoS class from it.
"""

from __future__ import annotations

import contextlib
import enum
import json
import uuid
from pathlib import Path

import attrs

from tests.runtime.containerd import Containerd

CGROUP_FS = Path("/sys/fs/cgroup")
PERIOD = 100_000


class QoS(enum.Enum):
    GUARANTEED = ""
    BURSTABLE = "burstable"
    BESTEFFORT = "besteffort"


@attrs.frozen
class Resources:
    """A container's CPU (in millicores) and memory, as kubelet translates them."""

    qos: QoS
    cpu_request_m: int = 0
    cpu_limit_m: int = 0
    memory_limit: int = 0

    def linux(self) -> dict[str, object]:
        shares = 2 if self.qos is QoS.BESTEFFORT else max(2, self.cpu_request_m * 1024 // 1000)
        out: dict[str, object] = {"cpu_shares": shares}
        if self.cpu_limit_m:
            out |= {"cpu_period": PERIOD, "cpu_quota": self.cpu_limit_m * PERIOD // 1000}
        if self.memory_limit:
            out["memory_limit_in_bytes"] = self.memory_limit
        return out


MIB = 1 << 20
GUARANTEED_1CPU = Resources(QoS.GUARANTEED, 1000, 1000, 64 * MIB)
BURSTABLE_250M = Resources(QoS.BURSTABLE, 250, 0, 64 * MIB)
BESTEFFORT = Resources(QoS.BESTEFFORT)


@attrs.frozen
class Placement:
    """What the kernel shows for a container's process and cgroup."""

    cpus: str
    mems: str
    allowed: str
    shares: int
    quota: int
    memory_limit: int


@attrs.frozen
class Container:
    id: str
    pod_id: str
    name: str
    pid: int


@attrs.define
class Cri:
    runtime: Containerd
    root: str  # the test's cgroup root, e.g. /nri-resmgr-test-1a2b
    workdir: Path

    def pod(
        self, name: str, qos: QoS, namespace: str = "default", uid: str | None = None
    ) -> tuple[str, Path]:
        """A sandbox; ``uid`` the API pod's, as kubelet passes it (default: a new one)."""
        uid = uid or str(uuid.uuid4())
        parent = f"{self.root}/kubepods" + (f"/{qos.value}" if qos.value else "")
        config = {
            "metadata": {"name": name, "namespace": namespace, "uid": uid, "attempt": 0},
            "log_directory": str(self.workdir / "logs" / uid),
            "linux": {
                "cgroup_parent": f"{parent}/pod{uid}",
                # Host network: no CNI on the test machine.
                "security_context": {"namespace_options": {"network": 2}},
            },
        }
        path = self.workdir / f"pod-{uid}.json"
        path.write_text(json.dumps(config))
        return self.runtime.crictl("runp", str(path)).strip(), path

    def container(
        self,
        pod_id: str,
        pod_config: Path,
        name: str,
        res: Resources,
        extra: dict[str, object] | None = None,
        command: tuple[str, ...] | None = ("/bin/sleep", "3600"),
        timeout: str = "30s",
    ) -> Container:
        """Create and start a container; its PID comes from crictl inspect."""
        config: dict[str, object] = {
            "metadata": {"name": name},
            "image": {"image": self.runtime.image},
            "log_path": f"{name}.log",
            "linux": {"resources": res.linux()},
        }
        if command is not None:
            config["command"] = list(command)
        if extra:
            config |= extra
        path = self.workdir / f"ctr-{pod_id[:12]}-{name}.json"
        path.write_text(json.dumps(config))
        cid = self.runtime.crictl("create", pod_id, str(path), str(pod_config), timeout=timeout)
        cid = cid.strip()
        self.runtime.crictl("start", cid)
        return Container(cid, pod_id, name, self.pid(cid))

    def run(
        self, name: str, res: Resources, namespace: str = "default", timeout: str = "30s"
    ) -> Container:
        """A one-container pod with the QoS class of ``res``."""
        pod_id, pod_config = self.pod(name, res.qos, namespace)
        return self.container(pod_id, pod_config, name, res, timeout=timeout)

    def pid(self, cid: str) -> int:
        info = json.loads(self.runtime.crictl("inspect", cid))
        return int(info["info"]["pid"])

    def remove_pod(self, pod_id: str) -> None:
        self.runtime.crictl("stopp", pod_id)
        self.runtime.crictl("rmp", pod_id)

    def remove_cgroups(self) -> None:
        """The test's cgroup tree in every v1 hierarchy, deepest directories first."""
        for hierarchy in CGROUP_FS.iterdir():
            top = hierarchy / self.root.lstrip("/")
            if not top.is_dir() or top.is_symlink():
                continue
            for d in sorted(top.rglob("*"), key=lambda p: len(p.parts), reverse=True):
                if d.is_dir():
                    with contextlib.suppress(OSError):
                        d.rmdir()
            with contextlib.suppress(OSError):
                top.rmdir()


def _cgroup_dir(pid: int, controller: str) -> Path:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            for name in (controllers, controller):
                if (CGROUP_FS / name).is_dir():
                    return CGROUP_FS / name / path.lstrip("/")
    raise LookupError(f"pid {pid} has no {controller} cgroup")


def _read(pid: int, controller: str, name: str) -> str:
    return (_cgroup_dir(pid, controller) / name).read_text().strip()


def allowed_list(pid: int) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    raise LookupError(f"no Cpus_allowed_list for pid {pid}")


def placement(c: Container) -> Placement:
    return Placement(
        cpus=_read(c.pid, "cpuset", "cpuset.cpus"),
        mems=_read(c.pid, "cpuset", "cpuset.mems"),
        allowed=allowed_list(c.pid),
        shares=int(_read(c.pid, "cpu", "cpu.shares")),
        quota=int(_read(c.pid, "cpu", "cpu.cfs_quota_us")),
        memory_limit=int(_read(c.pid, "memory", "memory.limit_in_bytes")),
    )
