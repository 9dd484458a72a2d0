"""A Kubernetes node without kubelet, in a guest: containerd 2.4 with NRI on, pods and
containers created through CRI as kubelet creates them, and a resource-management plugin
(ours, ``python3 -m nri_resmgr --config-file``, or upstream's Go plugin) started and stopped
the way an operator does.

    node = Node.install(guest)
    node.start_containerd()
    node.start_daemon(config_yaml)
    pod = node.run_pod(sandbox_config)              # RunPodSandbox
    c = node.start_container(pod, container_config) # create + start; its PID
    guest.placement(c.pid)                          # what the kernel applied

Everything runs at the guest's standard paths (``/run/containerd/containerd.sock``,
``/var/run/nri/nri.sock``, cgroupfs driver under cgroup v2); nothing listens on a network
address but guest loopback (containerd's stream server on 127.0.0.1).
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from tests.node.guest import COMMAND_TIMEOUT, Guest, GuestError
from tests.node.payload import image_tarball, project_tarball, runtime_tarball
from tests.runtime.ociimage import IMAGE_NAME

CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
CONTAINERD_LOG = "/var/log/containerd.log"
DAEMON_LOG = "/var/log/nri-resmgr.log"
DAEMON_CONFIG = "/etc/nri-resmgr/config.yaml"
SITE = "/opt/nri-resmgr/site"
PLUGIN = "90-resource-manager"
# Waits are bounds against a hang under TCG, in minutes; never a measure of speed.
START_TIMEOUT = 300.0
CONTAINER_RUNNING = 1

CONTAINERD_CONFIG = f"""\
version = 3

[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = '/var/run/nri/nri.sock'
  plugin_path = '/opt/nri/plugins'
  plugin_config_path = '/etc/nri/conf.d'
  # containerd's 2 s defaults flake under TCG: seconds, generously.
  plugin_registration_timeout = '60s'
  plugin_request_timeout = '60s'
  disable_connections = false

[plugins.'io.containerd.cri.v1.runtime']
  enable_cdi = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        SystemdCgroup = false

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '{IMAGE_NAME}'

[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'
"""


class CriError(GuestError):
    """A CRI call failed; the message is containerd's error (a plugin's included)."""


@attrs.frozen
class RunningContainer:
    id: str
    pod_id: str
    name: str
    pid: int


@attrs.define
class Plugin:
    """A plugin process in the guest (ours or upstream's)."""

    name: str
    pid: int
    log: str


class Node:
    def __init__(self, guest: Guest) -> None:
        self.guest = guest
        self.containerd_pid: int | None = None
        self.plugin: Plugin | None = None
        self.timings: dict[str, list[float]] = {}

    @classmethod
    def install(cls, guest: Guest) -> Node:
        """containerd, the project and the test image into the guest."""
        guest.unpack(runtime_tarball(), "/usr/local")
        guest.unpack(project_tarball(), "/opt/nri-resmgr")
        guest.copy_in(image_tarball(), "/var/lib/nri-test/busybox-oci.tar")
        guest.write("/etc/containerd/config.toml", CONTAINERD_CONFIG)
        guest.write("/etc/crictl.yaml", f"runtime-endpoint: unix://{CONTAINERD_SOCKET}\n"
                    f"image-endpoint: unix://{CONTAINERD_SOCKET}\n")  # fmt: skip
        guest.run("mkdir", "-p", "/opt/nri/plugins", "/etc/nri/conf.d", "/var/log/pods")
        # systemd makes / shared on every node; our PID 1 does not. Upstream's plugin adds an
        # rslave bind mount of its state to each container, which containerd refuses unless
        # the mount under it propagates ("mount propagation is \"\", not rshared or rslave").
        guest.run("mount", "--make-rshared", "/")
        # Sandboxes copy these; minbase has neither. No name server: nothing to resolve.
        guest.write("/etc/hosts", "127.0.0.1 localhost nri-node\n::1 localhost\n")
        guest.write("/etc/resolv.conf", "")
        return cls(guest)

    def timed(self, what: str, started: float) -> None:
        self.timings.setdefault(what, []).append(time.monotonic() - started)

    # -- containerd -----------------------------------------------------------------------

    def start_containerd(self) -> None:
        started = time.monotonic()
        self.containerd_pid = self.guest.spawn(
            "/usr/local/bin/containerd", "--log-level", "info", log=CONTAINERD_LOG
        )
        self._wait("containerd's CRI to answer", self._cri_answers, self._containerd_alive)
        self.timed("containerd start", started)

    def stop_containerd(self) -> None:
        if self.containerd_pid is None:
            return
        self.guest.signal(self.containerd_pid, signal.SIGTERM)
        if self.guest.wait(self.containerd_pid, 120) is None:
            self.guest.signal(self.containerd_pid, signal.SIGKILL)
            self.guest.wait(self.containerd_pid, 60)
        self.containerd_pid = None

    def import_image(self) -> None:
        started = time.monotonic()
        self.guest.run("/usr/local/bin/ctr", "-n", "k8s.io", "images", "import", "--platform",
                       "linux/amd64", "/var/lib/nri-test/busybox-oci.tar")  # fmt: skip
        self.timed("image import", started)

    def _containerd_alive(self) -> None:
        if self.containerd_pid is not None and self.guest.wait(self.containerd_pid, 0) is not None:
            raise GuestError(f"containerd exited:\n{self.log_tail(CONTAINERD_LOG)}")

    def containerd_log(self) -> str:
        return self.guest.read(CONTAINERD_LOG)

    # -- CRI ------------------------------------------------------------------------------

    def _cri_answers(self) -> bool:
        try:
            self.cri("version")
        except CriError:
            return False
        return True

    def cri(self, call: str, **args: Any) -> dict[str, Any]:
        """A CRI call through the guest agent; containerd's error as a CriError."""
        try:
            return self.guest.cri(call, **args)
        except GuestError as e:
            raise CriError(str(e)) from e

    def run_pod(self, config: Mapping[str, Any]) -> str:
        started = time.monotonic()
        pod_id = str(self.cri("run_pod", config=config)["id"])
        self.timed("pod sandbox", started)
        return pod_id

    def start_container(
        self, pod_id: str, pod_config: Mapping[str, Any], config: Mapping[str, Any]
    ) -> RunningContainer:
        """Create and start; fails with containerd's error (a plugin's refusal reads
        ``... failed: <the plugin's error>``)."""
        started = time.monotonic()
        made = self.cri("start_container", pod_id=pod_id, config=config,
                        sandbox_config=pod_config)  # fmt: skip
        self.timed("container create+start", started)
        if made["state"] != CONTAINER_RUNNING:
            raise CriError(f"container {config['metadata']['name']} is not running: {made}")
        return RunningContainer(made["id"], pod_id, config["metadata"]["name"], made["pid"])

    def start_pods(
        self, pods: Sequence[tuple[Mapping[str, Any], Sequence[Mapping[str, Any]]]]
    ) -> list[tuple[str, list[RunningContainer]]]:
        """Pods (sandbox config, container configs) made concurrently, for pods whose order
        does not matter (those there before any plugin starts): all sandboxes at once, then
        each pod's containers, the pods' first containers at once, and so on."""
        started = time.monotonic()
        reqs = [{"op": "cri", "call": "run_pod", "config": config} for config, _ in pods]
        pod_ids = [str(r["id"]) for r in self._cri_many(reqs)]
        made: list[list[RunningContainer]] = [[] for _ in pods]
        for i in range(max(len(containers) for _, containers in pods)):
            batch = [
                (n, pods[n][0], pods[n][1][i]) for n in range(len(pods)) if i < len(pods[n][1])
            ]
            reqs = [{"op": "cri", "call": "start_container", "pod_id": pod_ids[n], "config": c,
                     "sandbox_config": sandbox} for n, sandbox, c in batch]  # fmt: skip
            for (n, _, c), r in zip(batch, self._cri_many(reqs), strict=True):
                made[n].append(RunningContainer(r["id"], pod_ids[n], c["metadata"]["name"],
                                                r["pid"]))  # fmt: skip
        self.timed("pods made concurrently", started)
        return list(zip(pod_ids, made, strict=True))

    def _cri_many(self, reqs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        try:
            return self.guest.request_many(reqs, timeout=COMMAND_TIMEOUT)
        except GuestError as e:
            raise CriError(str(e)) from e

    def stop_container(self, cid: str) -> None:
        self.cri("stop_container", id=cid)

    def remove_container(self, cid: str) -> None:
        self.cri("remove_container", id=cid)

    def remove_pod(self, pod_id: str) -> None:
        self.cri("remove_pod", id=pod_id)

    def pods(self) -> list[dict[str, Any]]:
        return list(self.cri("pods")["pods"])

    def containers(self) -> list[dict[str, Any]]:
        return list(self.cri("containers")["containers"])

    def pids(self, cids: list[str]) -> dict[str, int]:
        return {cid: int(self.cri("status", id=cid)["pid"]) for cid in cids}

    # -- the plugin -----------------------------------------------------------------------

    def start_daemon(
        self, config: str, log_level: str = "info", env: Mapping[str, str] | None = None
    ) -> Plugin:
        """Ours, as in production: ``python3 -m nri_resmgr --config-file``."""
        self.guest.write(DAEMON_CONFIG, config)
        argv = ("/usr/bin/python3", "-m", "nri_resmgr", "--config-file", DAEMON_CONFIG,
                "--log-level", log_level)  # fmt: skip
        env = {"PYTHONPATH": SITE, "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1",
               **(env or {})}  # fmt: skip
        return self.start_plugin("nri-resmgr", argv, DAEMON_LOG, env)

    def start_plugin(
        self, name: str, argv: tuple[str, ...], log: str, env: Mapping[str, str] | None = None
    ) -> Plugin:
        """Start a plugin and wait until containerd logs it synchronized."""
        assert self.plugin is None, f"{self.plugin} still runs"
        before = self.registrations()
        started = time.monotonic()
        pid = self.guest.spawn(*argv, log=log, env=env)
        self.plugin = Plugin(name, pid, log)

        def alive() -> None:
            if self.guest.wait(pid, 0) is not None:
                self.plugin = None
                raise GuestError(f"{name} exited at start:\n{self.log_tail(log)}")

        self._wait(f"{name} to register", lambda: self.registrations() > before, alive)
        self.timed(f"{name} start", started)
        return self.plugin

    def stop_plugin(self, sig: signal.Signals = signal.SIGTERM) -> int | None:
        """Signal the plugin and wait for it; its exit status (None if it had to be killed)."""
        plugin, self.plugin = self.plugin, None
        if plugin is None:
            return None
        self.guest.signal(plugin.pid, sig)
        rc = self.guest.wait(plugin.pid, 120)
        if rc is None:
            self.guest.signal(plugin.pid, signal.SIGKILL)
            self.guest.wait(plugin.pid, 60)
        return rc

    def registrations(self) -> int:
        """How many times containerd logged a plugin synchronized."""
        out = self.guest.sh(
            f"grep -c 'connected and synchronized' {CONTAINERD_LOG} || true"
        ).out.strip()
        return int(out or 0)

    def log_tail(self, path: str, lines: int = 40) -> str:
        return self.guest.sh(f"tail -n {lines} {path} 2>&1 || true").out

    def grep(self, path: str, pattern: str) -> list[str]:
        out = self.guest.run("grep", "-E", pattern, path, check=False).out
        return out.splitlines()

    def _wait(self, what: str, ready: Callable[[], bool], alive: Callable[[], None]) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not ready():
            alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {START_TIMEOUT:.0f}s for {what}")
            time.sleep(1)


def refusal(error: str) -> str:
    """The plugin's own words in a failed create's error, when it has any."""
    m = re.search(r"failed: (.*)$", error.strip())
    return m.group(1) if m else error
