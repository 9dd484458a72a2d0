"""One real containerd (v2, NRI on, cgroupfs driver) under a temp dir, driven through crictl.

Everything containerd owns lives under one directory: root, state, sockets, runc's root, the
NRI socket. On the way out every pod is removed through CRI, containerd is stopped by its PID,
leftover shims of this instance (found by our unique address in their command line) are
killed by PID, mounts under the directory are unmounted and the test's cgroup tree removed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tests.runtime.build import PeerUnavailable

CONFIG = """\
version = 3
root = '{d}/root'
state = '{d}/state'

[grpc]
  address = '{d}/containerd.sock'

[ttrpc]
  address = ''

[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = '{d}/nri/nri.sock'
  plugin_path = '{d}/nri/plugins'
  plugin_config_path = '{d}/nri/conf.d'
  plugin_registration_timeout = '5s'
  plugin_request_timeout = '{request_timeout}'
  disable_connections = false

[plugins.'io.containerd.cri.v1.runtime']
  # The test sandbox lacks CAP_SYS_RESOURCE: runc cannot raise oom_score_adj.
  restrict_oom_score_adj = true
  # CDI from our directory only (never the host's /etc/cdi, /var/run/cdi): the DRA tests'
  # daemon writes its claim specs there; a container naming no CDI device is untouched.
  enable_cdi = true
  cdi_spec_dirs = ['{d}/cdi']
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['{d}/cni/bin']
    conf_dir = '{d}/cni/conf'
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = '{runc}'
        Root = '{d}/runc'

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '{image}'

[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'
"""

# containerd 1.7: config version 2, CRI options in one plugin section; NRI is off unless
# enabled here (its NRI v0.6 sends container events to plugins as StateChange).
CONFIG_1_7 = """\
version = 2
root = '{d}/root'
state = '{d}/state'

[grpc]
  address = '{d}/containerd.sock'

[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = '{d}/nri/nri.sock'
  plugin_path = '{d}/nri/plugins'
  plugin_config_path = '{d}/nri/conf.d'
  plugin_registration_timeout = '5s'
  plugin_request_timeout = '{request_timeout}'
  disable_connections = false

[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'
  restrict_oom_score_adj = true
  sandbox_image = '{image}'
  enable_cdi = false
  [plugins.'io.containerd.grpc.v1.cri'.cni]
    bin_dir = '{d}/cni/bin'
    conf_dir = '{d}/cni/conf'
  [plugins.'io.containerd.grpc.v1.cri'.containerd]
    snapshotter = 'overlayfs'
    default_runtime_name = 'runc'
    [plugins.'io.containerd.grpc.v1.cri'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.grpc.v1.cri'.containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = '{runc}'
        Root = '{d}/runc'
"""

REQUEST_TIMEOUT = 2.0  # containerd's plugin_request_timeout, in seconds


def wait_for(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll ``check`` until it holds; a barrier on observable state, not a sleep."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)


class Containerd:
    def __init__(
        self,
        bindir: Path,
        workdir: Path,
        image: str,
        runc: str,
        config: str = CONFIG,
        crictl: Path | None = None,
    ) -> None:
        self.bindir = bindir
        self.template = config
        self.crictl_path = crictl or bindir / "crictl"
        self.dir = workdir
        self.image = image
        self.runc = runc
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "containerd.log"
        self.address = str(workdir / "containerd.sock")
        self.nri_socket = str(workdir / "nri" / "nri.sock")
        self.starts = 0
        self.start_seconds: list[float] = []

    @property
    def config_path(self) -> Path:
        return self.dir / "config.toml"

    @property
    def cdi_dir(self) -> Path:
        """The CDI spec directory containerd 2 reads (1.7's config leaves CDI off)."""
        return self.dir / "cdi"

    def write_config(self) -> None:
        for sub in ("nri/plugins", "nri/conf.d", "cni/bin", "cni/conf", "cdi"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        text = self.template.format(
            d=self.dir, runc=self.runc, image=self.image, request_timeout=f"{REQUEST_TIMEOUT:g}s"
        )
        self.config_path.write_text(text)
        (self.dir / "crictl.yaml").write_text(f"runtime-endpoint: unix://{self.address}\n")

    def start(self) -> None:
        started = time.monotonic()
        log = self.log_path.open("ab")
        env = os.environ | {"PATH": f"{self.bindir}:{os.environ.get('PATH', '')}"}
        self.proc = subprocess.Popen(
            [
                str(self.bindir / "containerd"),
                "--config",
                str(self.config_path),
                "--log-level",
                "info",
            ],
            stdout=log,
            stderr=log,
            env=env,
            start_new_session=True,
        )
        log.close()
        self.starts += 1

        def ready() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                code = self.proc.returncode
                raise PeerUnavailable(f"containerd exited {code}:\n{self.log_tail()}")
            return self.crictl_ok("info")

        wait_for("containerd's CRI to answer", ready)
        self.start_seconds.append(time.monotonic() - started)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    # -- CLI helpers --------------------------------------------------------------------

    def crictl(self, *args: str, timeout: str = "30s") -> str:
        cmd = [
            str(self.crictl_path),
            "--config",  # ours, so no /etc/crictl.yaml (or its absence) comes into play
            str(self.dir / "crictl.yaml"),
            "--runtime-endpoint",
            f"unix://{self.address}",
            "--image-endpoint",
            f"unix://{self.address}",
            "--timeout",
            timeout,
            *args,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"crictl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc.stdout

    def crictl_ok(self, *args: str) -> bool:
        try:
            self.crictl(*args, timeout="2s")
        except RuntimeError:
            return False
        return True

    def ctr(self, *args: str) -> str:
        cmd = [str(self.bindir / "ctr"), "--address", self.address, "-n", "k8s.io", *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"ctr {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc.stdout

    def import_image(self, archive: Path) -> None:
        self.ctr("images", "import", "--platform", "linux/amd64", str(archive))

    # -- cleanup ------------------------------------------------------------------------

    def remove_all_pods(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(RuntimeError):
                self.crictl("rmp", "--all", "--force")

    def cleanup(self) -> None:
        """Leave nothing behind: pods, containerd, this instance's shims, mounts."""
        self.remove_all_pods()
        self.stop()
        for pid in self._own_shims():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for mountpoint in self._own_mounts():
            subprocess.run(["umount", "-l", mountpoint], capture_output=True, check=False)

    def _own_shims(self) -> list[int]:
        pids = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                cmdline = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if b"containerd-shim" in cmdline and self.address.encode() in cmdline:
                pids.append(int(proc.name))
        return pids

    def _own_mounts(self) -> list[str]:
        prefix = str(self.dir) + "/"
        points = []
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].replace("\\040", " ")
            if point.startswith(prefix):
                points.append(point)
        return sorted(points, key=len, reverse=True)
