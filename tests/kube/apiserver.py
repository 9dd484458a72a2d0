"""A real etcd + kube-apiserver on loopback for integration tests.

Everything lives in one temporary directory: an openssl-made CA and serving certificate, a
service-account key pair, a static token file (``admin`` in system:masters, ``viewer`` with no
RBAC grants), a client certificate in system:masters, etcd's data and a kubeconfig with a
context for each (``admin``, the current one; ``viewer``; ``cert``). The API server can be
killed and started again on the same port and etcd, to test clients across a restart.
"""

from __future__ import annotations

import base64
import contextlib
import random
import socket
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import httpx
import pytest
import trio

from nri_resmgr.kube import ClusterConfig, load_kubeconfig
from tests.kube.gobuild import KUBERNETES_VERSION, BuildError, ensure_binaries
from tests.peers import missing_peer

ADMIN_TOKEN = "admin-token-for-tests"
VIEWER_TOKEN = "viewer-token-for-tests"
READY_TIMEOUT = 180.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def stable_port() -> int:
    """A free port below the kernel's ephemeral range, for a server the tests restart.

    While a server on an ephemeral port is down, the kernel may hand that port to a client's
    connection (even a client reconnecting to the very port: a TCP self-connect) or to
    ``free_port``, and the restarted server then cannot bind it.
    """
    low = _ephemeral_low()
    for _ in range(200):
        port = random.randrange(max(1024, low - 20000), low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port below the ephemeral range (starts at {low})")


def _ephemeral_low() -> int:
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
    except OSError:
        return 32768
    return int(text.split()[0])


class ServerExited(RuntimeError):
    """etcd or kube-apiserver exited while the tests waited for it."""


@attrs.define
class ApiServer:
    workdir: Path
    kube_apiserver: Path
    etcd: Path
    port: int = attrs.field(factory=stable_port)
    etcd_port: int = attrs.field(factory=stable_port)
    etcd_peer_port: int = attrs.field(factory=stable_port)
    flags: tuple[str, ...] = ()
    """More kube-apiserver flags, after (so overriding) the defaults below."""
    version: str = KUBERNETES_VERSION
    """The Kubernetes version ``kube_apiserver`` was built from."""
    _etcd_proc: subprocess.Popen[bytes] | None = None
    _api_proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    def config(self) -> ClusterConfig:
        return load_kubeconfig([self.kubeconfig])

    def viewer_config(self) -> ClusterConfig:
        return load_kubeconfig([self.kubeconfig], context="viewer")

    def client_cert_config(self) -> ClusterConfig:
        return load_kubeconfig([self.kubeconfig], context="cert")

    def start_etcd(self) -> None:
        url, peer = f"http://127.0.0.1:{self.etcd_port}", f"http://127.0.0.1:{self.etcd_peer_port}"
        args = [str(self.etcd), "--name=test", f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={url}", f"--advertise-client-urls={url}",
                f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=test={peer}", "--log-level=warn",
                "--unsafe-no-fsync"]  # fmt: skip
        self._etcd_proc = _spawn(args, self.workdir / "etcd.log")

    def start_apiserver_process(self) -> None:
        w = self.workdir
        args = [str(self.kube_apiserver),
                f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
                "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}", f"--cert-dir={w / 'certs'}",
                f"--tls-cert-file={w / 'serving.crt'}",
                f"--tls-private-key-file={w / 'serving.key'}",
                f"--token-auth-file={w / 'tokens.csv'}", "--authorization-mode=RBAC",
                f"--client-ca-file={w / 'ca.crt'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={w / 'sa.pub'}",
                f"--service-account-signing-key-file={w / 'sa.key'}",
                "--service-cluster-ip-range=10.96.0.0/24",
                "--enable-admission-plugins=NamespaceLifecycle",
                "--disable-admission-plugins=ServiceAccount",
                "--enable-priority-and-fairness=false", "--profiling=false",
                "--endpoint-reconciler-type=none", *self.flags]  # fmt: skip
        self._api_proc = _spawn(args, w / "kube-apiserver.log")

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while not self._ready():
            if time.monotonic() > deadline:
                raise RuntimeError(f"kube-apiserver not ready after {timeout}s\n{self.log_tail()}")
            time.sleep(0.2)

    async def wait_ready_async(self, timeout: float = READY_TIMEOUT) -> None:
        with trio.fail_after(timeout):
            while not self._ready():
                await trio.sleep(0.2)

    def stop_apiserver(self) -> None:
        _stop(self._api_proc)
        self._api_proc = None

    async def crash_apiserver(self) -> None:
        """Kills the API server without blocking trio, so watchers run while it is down.

        SIGKILL, because a graceful stop holds open watches for tens of seconds before exiting.
        """
        proc, self._api_proc = self._api_proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.kill()
        while proc.poll() is None:
            await trio.sleep(0.05)

    @contextlib.asynccontextmanager
    async def down(self) -> AsyncIterator[None]:
        """The API server crashed for the body, and started again after it even if it fails.

        The server is shared by the session: left down by one failing test, it would fail
        every later one with "connection refused" and hide the first failure among them.
        """
        await self.crash_apiserver()
        try:
            yield
        finally:
            with trio.CancelScope(shield=True):
                await self.restart_apiserver()

    async def restart_apiserver(self, attempts: int = 3) -> None:
        """Starts the API server again after ``crash_apiserver`` and waits until it is ready.

        A start that dies before it is ready (its port not yet free, say) is retried, so one
        test's restart cannot leave the session's shared server down for every later test.
        """
        for attempt in range(1, attempts + 1):
            self.start_apiserver_process()
            try:
                await self.wait_ready_async()
                return
            except ServerExited:
                if attempt == attempts:
                    raise
                await trio.sleep(0.5 * attempt)

    def shutdown(self) -> None:
        self.stop_apiserver()
        _stop(self._etcd_proc)
        self._etcd_proc = None

    def log_tail(self, lines: int = 30) -> str:
        log = self.workdir / "kube-apiserver.log"
        text = log.read_text(errors="replace") if log.exists() else "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def _ready(self) -> bool:
        for proc, name in ((self._etcd_proc, "etcd"), (self._api_proc, "kube-apiserver")):
            if proc is None or proc.poll() is not None:
                raise ServerExited(f"{name} is not running\n{self.log_tail()}")
        try:
            resp = httpx.get(
                f"{self.url}/readyz",
                verify=self.config().ssl_context(),
                headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
                timeout=5,
            )
        except httpx.TransportError:
            return False
        return resp.status_code == 200


def start_apiserver(
    workdir: Path, version: str = KUBERNETES_VERSION, flags: tuple[str, ...] = ()
) -> ApiServer:
    """Builds (if needed) and starts etcd + kube-apiserver ``version``, with ``flags`` added.

    A failed build fails the test under CI=true and skips it elsewhere (``tests/peers.py``);
    a server that is built but does not start is always an error.
    """
    try:
        kube_apiserver, etcd = ensure_binaries(version)
    except BuildError as exc:
        missing_peer(f"kube-apiserver {version}/etcd peer cannot be built here: {exc}")
    server = ApiServer(workdir, kube_apiserver, etcd, flags=flags, version=version)
    _make_credentials(workdir)
    _write_kubeconfig(server)
    server.start_etcd()
    try:
        server.start_apiserver_process()
        server.wait_ready()
    except BaseException:
        server.shutdown()
        raise
    return server


SHARED_APISERVERS = {KUBERNETES_VERSION: "apiserver", "v1.37.2": "apiserver_137"}
"""The session's API servers by version: the fixture (``tests/conftest.py``) that starts each."""


def session_apiserver(request: pytest.FixtureRequest, version: str) -> ApiServer:
    """The session's API server of ``version``: one of the shared ones, so a test
    parametrized over versions starts no server of its own; another version (only a nox
    session asks for one) gets one started on first use and kept for the session."""
    if version in SHARED_APISERVERS:
        server: ApiServer = request.getfixturevalue(SHARED_APISERVERS[version])
        return server
    others: dict[str, ApiServer] = request.getfixturevalue("other_apiservers")
    if version not in others:
        factory: pytest.TempPathFactory = request.getfixturevalue("tmp_path_factory")
        others[version] = start_apiserver(factory.mktemp(f"apiserver-{version}"), version)
    return others[version]


def _spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )


def _stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _make_credentials(w: Path) -> None:
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
             "-subj", "/CN=nri-resmgr-test-ca",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=w)  # fmt: skip
    _openssl("req", *ec, "-keyout", "serving.key", "-out", "serving.csr",
             "-subj", "/CN=kube-apiserver", cwd=w)  # fmt: skip
    (w / "serving.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
        "keyUsage=critical,digitalSignature\nauthorityKeyIdentifier=keyid\n"
    )
    _openssl("x509", "-req", "-in", "serving.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "serving.crt", "-days", "2",
             "-extfile", "serving.ext", cwd=w)  # fmt: skip
    _openssl("req", *ec, "-keyout", "client.key", "-out", "client.csr",
             "-subj", "/O=system:masters/CN=cert-admin", cwd=w)  # fmt: skip
    (w / "client.ext").write_text(
        "extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature\n"
    )
    _openssl("x509", "-req", "-in", "client.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "client.crt", "-days", "2",
             "-extfile", "client.ext", cwd=w)  # fmt: skip
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-out", "sa.key", cwd=w)  # fmt: skip
    _openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=w)
    (w / "tokens.csv").write_text(
        f'{ADMIN_TOKEN},admin,admin-uid,"system:masters"\n{VIEWER_TOKEN},viewer,viewer-uid\n'
    )


def _write_kubeconfig(server: ApiServer) -> None:
    key_data = base64.b64encode((server.workdir / "client.key").read_bytes()).decode()
    server.kubeconfig.write_text(
        f"""apiVersion: v1
kind: Config
current-context: admin
clusters:
- name: test
  cluster:
    server: {server.url}
    certificate-authority: ca.crt
contexts:
- name: admin
  context: {{cluster: test, user: admin}}
- name: viewer
  context: {{cluster: test, user: viewer}}
- name: cert
  context: {{cluster: test, user: cert}}
users:
- name: admin
  user: {{token: {ADMIN_TOKEN}}}
- name: viewer
  user: {{token: {VIEWER_TOKEN}}}
- name: cert
  user: {{client-certificate: client.crt, client-key-data: {key_data}}}
"""
    )
