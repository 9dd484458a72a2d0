"""A one-node Kubernetes cluster inside the node guest: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and kubelet, all on the guest's loopback.

    cluster = Cluster.start(guest, node, binaries)   # containerd already running
    cluster.apply(manifest_yaml)                     # kubectl in the guest
    cluster.get("pod", "p", namespace="default")     # the apiserver's object, as JSON

The binaries are built on the host from k8s.io/kubernetes' published module at
``CLUSTER_VERSION`` (``tests.kube.gobuild``, the same wrapper modules and Go caches as the
suite's apiserver and scheduler peers) and copied in through the 9p share. Certificates are
made on the host the way the suite's host apiserver makes them (``tests.kube.apiserver``),
and every component authenticates with the system:masters client certificate: this cluster
proves the node, not its RBAC (the chart's RBAC is what its pods run under).

Networking (docs/development.md, "The real node"): the guest has no network device, and
nothing here listens on or talks to anything but 127.0.0.1. The API server serves on
127.0.0.1:443 and the service range is 127.0.0.0/24, so the ``kubernetes`` Service is
127.0.0.1:443 and a hostNetwork pod's in-cluster configuration reaches the API server over
the guest's loopback. containerd's CNI has one network, the ``loopback`` plugin only: its
runtime reports the network ready (the node goes Ready), and only hostNetwork pods run.
The node's name and only address is 127.0.0.1 (``NODE_NAME`` says why).
"""

from __future__ import annotations

import base64
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nri_resmgr.cpuset import CpuSet
from tests.kube.apiserver import _make_credentials, _openssl
from tests.kube.gobuild import ensure_etcd, ensure_kube_apiserver, ensure_kube_command
from tests.node.guest import CGROUP, Guest, GuestError, KernelPlacement
from tests.node.node import CONTAINERD_SOCKET, Node

CLUSTER_VERSION = "v1.37.2"
# kubelet refuses a loopback node IP (--node-ip), except a hostname override that is an IP:
# that becomes the node's name and InternalIP, and a hostNetwork pod's IP, so the API server
# reaches kubelet (logs, exec) and kubelet reaches a pod's probes on the guest's loopback.
NODE_NAME = "127.0.0.1"
COMMANDS = {
    "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
    "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
    "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
    "kubelet": "k8s.io/kubernetes/cmd/kubelet",
    "kubectl": "k8s.io/kubernetes/cmd/kubectl",
}
PKI = "/etc/kubernetes/pki"
ADMIN_CONF = "/etc/kubernetes/admin.conf"
# kubelet's own credentials (system:node:<name> in system:nodes), so that the Node authorizer
# and NodeRestriction judge what it reads and writes, as on a production node.
KUBELET_CONF = "/etc/kubernetes/kubelet.conf"
BIN = "/usr/local/bin"
LOGS = "/var/log/kube"
API_PORT = 443
SERVICE_RANGE = "127.0.0.0/24"
# Bounds against a hang under TCG (every component's start is minutes there), not speeds.
START_TIMEOUT = 900.0
POLL = 5.0
NODES = "/sys/devices/system/node"

KUBELET_CONFIG = f"""\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
cgroupDriver: cgroupfs
failSwapOn: false
containerRuntimeEndpoint: unix://{CONTAINERD_SOCKET}
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: false}}
  x509: {{clientCAFile: {PKI}/ca.crt}}
authorization: {{mode: AlwaysAllow}}
# The guest's disk and memory are small and snapshot-backed: no eviction, no image GC.
evictionHard: {{memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%"}}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
resolvConf: /etc/resolv.conf
# Under TCG the runtime answers in seconds, not milliseconds.
runtimeRequestTimeout: 10m
"""

# containerd counts this network (and its own loopback) to report the runtime network ready.
CNI_CONFIG = """\
{"cniVersion": "1.0.0", "name": "loopback-only", "plugins": [{"type": "loopback"}]}
"""


def ensure_cluster_binaries() -> dict[str, Path]:
    """The control plane, kubelet and kubectl at ``CLUSTER_VERSION``, and etcd, built on
    first use (``BuildError`` when they cannot be)."""
    found = {"etcd": ensure_etcd()}
    found["kube-apiserver"] = ensure_kube_apiserver(CLUSTER_VERSION)
    for name, package in COMMANDS.items():
        if name not in found:
            found[name] = ensure_kube_command(name, package, CLUSTER_VERSION)
    return found


def make_pki(workdir: Path) -> dict[str, str]:
    """The CA, the API server's serving pair, the service-account keys, an admin kubeconfig
    (system:masters client certificate) and kubelet's (its node identity), as guest path ->
    content."""
    workdir.mkdir(parents=True, exist_ok=True)
    _make_credentials(workdir)
    _make_node_credentials(workdir)
    files = {f"{PKI}/{name}": (workdir / name).read_text()
             for name in ("ca.crt", "serving.crt", "serving.key", "sa.key", "sa.pub",
                          "client.crt", "client.key")}  # fmt: skip
    files[ADMIN_CONF] = kubeconfig(workdir, "admin", "client")
    files[KUBELET_CONF] = kubeconfig(workdir, f"system:node:{NODE_NAME}", "kubelet")
    return files


def _make_node_credentials(w: Path) -> None:
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", *ec, "-keyout", "kubelet.key", "-out", "kubelet.csr",
             "-subj", f"/O=system:nodes/CN=system:node:{NODE_NAME}", cwd=w)  # fmt: skip
    _openssl("x509", "-req", "-in", "kubelet.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "kubelet.crt", "-days", "2",
             "-extfile", "client.ext", cwd=w)  # fmt: skip


def kubeconfig(workdir: Path, user: str, pair: str) -> str:
    """A kubeconfig for ``user`` with the client certificate ``<pair>.crt``/``.key``."""

    def data(name: str) -> str:
        return base64.b64encode((workdir / name).read_bytes()).decode()

    return f"""apiVersion: v1
kind: Config
current-context: {user}
clusters:
- name: guest
  cluster:
    server: https://127.0.0.1:{API_PORT}
    certificate-authority-data: {data("ca.crt")}
contexts:
- name: {user}
  context: {{cluster: guest, user: {user}}}
users:
- name: {user}
  user:
    client-certificate-data: {data(f"{pair}.crt")}
    client-key-data: {data(f"{pair}.key")}
"""


class Cluster:
    def __init__(self, guest: Guest, node: Node) -> None:
        self.guest = guest
        self.node = node
        self.pids: dict[str, int] = {}
        self.timings: dict[str, float] = {}

    @classmethod
    def start(cls, guest: Guest, node: Node, binaries: dict[str, Path], pki: Path) -> Cluster:
        cluster = cls(guest, node)
        cluster.install(binaries, make_pki(pki))
        cluster.start_control_plane()
        cluster.start_kubelet()
        return cluster

    def _timed(self, what: str, started: float) -> None:
        self.timings[what] = time.monotonic() - started
        print(f"cluster: {what} {self.timings[what]:.0f}s", file=sys.stderr)  # progress, -s

    def install(self, binaries: dict[str, Path], files: dict[str, str]) -> None:
        started = time.monotonic()
        for name, path in binaries.items():
            self.guest.copy_in(path, f"{BIN}/{name}", mode=0o755)
        for target, content in files.items():
            self.guest.write(target, content, mode=0o600)  # the agent makes the directories
        self.guest.run("mkdir", "-p", LOGS)
        self.guest.write("/etc/cni/net.d/10-loopback.conflist", CNI_CONFIG)
        self.guest.write("/var/lib/kubelet/config.yaml", KUBELET_CONFIG)
        self._timed("install", started)

    def spawn(self, name: str, *args: str) -> None:
        self.pids[name] = self.guest.spawn(f"{BIN}/{name}", *args, log=f"{LOGS}/{name}.log")

    def start_control_plane(self) -> None:
        started = time.monotonic()
        self.spawn("etcd", "--name=guest", "--data-dir=/var/lib/etcd",
                   "--listen-client-urls=http://127.0.0.1:2379",
                   "--advertise-client-urls=http://127.0.0.1:2379",
                   "--listen-peer-urls=http://127.0.0.1:2380",
                   "--initial-advertise-peer-urls=http://127.0.0.1:2380",
                   "--initial-cluster=guest=http://127.0.0.1:2380",
                   "--log-level=warn", "--unsafe-no-fsync")  # fmt: skip
        self.spawn("kube-apiserver", "--etcd-servers=http://127.0.0.1:2379",
                   "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
                   f"--secure-port={API_PORT}", "--cert-dir=/var/lib/kube-apiserver",
                   f"--tls-cert-file={PKI}/serving.crt",
                   f"--tls-private-key-file={PKI}/serving.key",
                   f"--client-ca-file={PKI}/ca.crt", "--authorization-mode=Node,RBAC",
                   "--enable-admission-plugins=NodeRestriction",
                   "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                   f"--service-account-key-file={PKI}/sa.pub",
                   f"--service-account-signing-key-file={PKI}/sa.key",
                   f"--service-cluster-ip-range={SERVICE_RANGE}",
                   f"--kubelet-client-certificate={PKI}/client.crt",
                   f"--kubelet-client-key={PKI}/client.key",
                   # Its 60 s default fails requests under TCG (helm's apply of a
                   # PriorityLevelConfiguration timed out so).
                   "--request-timeout=5m",
                   "--endpoint-reconciler-type=none", "--profiling=false")  # fmt: skip
        self.wait("the API server to be ready", self.api_ready)
        self._timed("apiserver ready", started)
        kube = (f"--kubeconfig={ADMIN_CONF}", "--bind-address=127.0.0.1",
                "--leader-elect=false", "--profiling=false")  # fmt: skip
        self.spawn("kube-controller-manager", *kube, f"--root-ca-file={PKI}/ca.crt",
                   f"--service-account-private-key-file={PKI}/sa.key",
                   "--use-service-account-credentials=false")  # fmt: skip
        self.spawn("kube-scheduler", *kube)

    def start_kubelet(self) -> None:
        started = time.monotonic()
        self.spawn("kubelet", "--config=/var/lib/kubelet/config.yaml",
                   f"--kubeconfig={KUBELET_CONF}", f"--hostname-override={NODE_NAME}",
                   "--v=1")  # fmt: skip
        self.wait(f"node {NODE_NAME} to be Ready", self.node_ready)
        self._timed("kubelet start to node Ready", started)

    # -- reading the cluster (kubectl in the guest) ----------------------------------------

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        done = self.guest.run(f"{BIN}/kubectl", f"--kubeconfig={ADMIN_CONF}",
                              "--request-timeout=300s", *args, input=input, check=check,
                              timeout=300)  # fmt: skip
        return done.out

    def helm(self, *args: str) -> str:
        done = self.guest.run(f"{BIN}/helm", f"--kubeconfig={ADMIN_CONF}", *args,
                              env={"HOME": "/root"}, timeout=600)  # fmt: skip
        return done.out

    def apply(self, manifest: str) -> None:
        self.kubectl("apply", "-f", "-", input=manifest)

    def get(
        self, kind: str, name: str = "", namespace: str = "", selector: str = ""
    ) -> dict[str, Any]:
        found = self.try_get(kind, name, namespace, selector, timeout=300)
        if found is None:
            raise GuestError(f"kubectl get {kind} {name} failed:\n{self.logs()}")
        return found

    def try_get(
        self,
        kind: str,
        name: str = "",
        namespace: str = "",
        selector: str = "",
        timeout: float = 60,
    ) -> dict[str, Any] | None:
        """The object as JSON, or None when the API server did not answer in ``timeout``
        (a poll under TCG: the guest, or its API server, may stall for a while)."""
        args = ["get", kind, *([name] if name else []), "-o", "json"]
        args += [f"--namespace={namespace}"] if namespace else []
        args += [f"--selector={selector}"] if selector else []
        try:
            done = self.guest.run(f"{BIN}/kubectl", f"--kubeconfig={ADMIN_CONF}",
                                  f"--request-timeout={timeout:.0f}s", *args, check=False,
                                  timeout=timeout + 60)  # fmt: skip
        except TimeoutError:
            return None
        if done.rc != 0:
            return None
        found: dict[str, Any] = json.loads(done.out)
        return found

    # -- reading the guest kernel ---------------------------------------------------------

    def container_placement(self, pod: dict[str, Any], index: int = 0) -> KernelPlacement:
        """Where the kernel holds a pod's container: its cgroup (cgroupfs driver:
        ``kubepods[/<qos>]/pod<uid>/<id>``) and the first process in it."""
        status = pod["status"]["containerStatuses"][index]
        cid = status["containerID"].removeprefix("containerd://")
        found = self.guest.sh(f"find {CGROUP}/kubepods -maxdepth 3 -type d -name {cid}").out
        (cgroup,) = found.split()
        assert f"pod{pod['metadata']['uid']}" in cgroup, cgroup
        pid = int(self.guest.read(f"{cgroup}/cgroup.procs").split()[0])
        return self.guest.placement(pid)

    def numa_nodes(self) -> dict[int, frozenset[int]]:
        """The guest kernel's NUMA nodes with CPUs, and their CPUs."""
        out = self.guest.sh(f"grep . {NODES}/node*/cpulist").out
        nodes = {}
        for line in out.splitlines():  # /sys/.../node3/cpulist:12-15
            path, cpus = line.split(":", 1)
            if cpus.strip():
                nodes[int(path.split("/")[-2].removeprefix("node"))] = parse_cpus(cpus)
        return nodes

    def api_ready(self) -> bool:
        try:
            done = self.guest.run(f"{BIN}/kubectl", f"--kubeconfig={ADMIN_CONF}",
                                  "--request-timeout=30s", "get", "--raw", "/readyz",
                                  check=False, timeout=120)  # fmt: skip
        except TimeoutError:
            return False
        return done.rc == 0 and done.out.strip() == "ok"

    def node_ready(self) -> bool:
        node = self.try_get("node", NODE_NAME)
        return node is not None and condition(node, "Ready") == "True"

    def wait(
        self,
        what: str,
        ready: Callable[[], bool],
        timeout: float = START_TIMEOUT,
        explain: Callable[[], str] | None = None,
    ) -> None:
        """Poll ``ready`` until it holds; on a timeout, the components' logs and what
        ``explain`` says (the objects' state) in the error."""
        deadline = time.monotonic() + timeout
        while not ready():
            self.alive()
            if time.monotonic() > deadline:
                told = explain() if explain else ""
                raise TimeoutError(f"waited {timeout:.0f}s for {what}:\n{told}\n{self.logs()}")
            time.sleep(POLL)

    def describe(self, *args: str) -> str:
        """``kubectl describe`` (events included), for a failure's message."""
        return self.kubectl("describe", *args, check=False)

    def alive(self) -> None:
        for name, pid in self.pids.items():
            if self.guest.wait(pid, 0) is not None:
                raise GuestError(f"{name} exited:\n{self.node.log_tail(f'{LOGS}/{name}.log')}")

    def logs(self, lines: int = 15) -> str:
        return "\n".join(f"--- {name}\n{self.node.log_tail(f'{LOGS}/{name}.log', lines)}"
                         for name in self.pids)  # fmt: skip


def parse_cpus(text: str) -> frozenset[int]:
    return frozenset(CpuSet.parse(text.strip()))


def condition(obj: dict[str, Any], kind: str) -> str | None:
    """The status of an object's condition ``kind`` ("True", "False", "Unknown"), if any."""
    for cond in obj.get("status", {}).get("conditions", []):
        if cond.get("type") == kind:
            return str(cond.get("status"))
    return None
