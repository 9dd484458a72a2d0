"""Where the API server is and how to talk to it: in-cluster service account or a kubeconfig.

Selection (as client-go's ``BuildConfigFromFlags`` plus ``KUBECONFIG``): an explicit
``--kubeconfig`` path wins, else the ``KUBECONFIG`` variable (a ``:``-separated list, merged
first-wins), else the in-cluster service account. Nothing found is a ``ConfigError``.

A kubeconfig is checked as client-go checks it: every section has the shape it should
(a malformed one is a ``ConfigError`` naming the key, never a TypeError), booleans are real
booleans (a quoted ``"false"`` does not turn TLS verification off), and an insecure cluster
that also names a CA is refused. A bearer token is never sent over plain ``http://`` unless
the operator opts in with ``NRI_RESMGR_ALLOW_HTTP_TOKEN=true``.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import yaml

from nri_resmgr.errors import ConfigError
from nri_resmgr.kube.auth import StaticToken, TokenFile, TokenSource

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# The explicit opt-in to send a bearer token over plain http (a local test server, a proxy).
ALLOW_HTTP_TOKEN_ENV = "NRI_RESMGR_ALLOW_HTTP_TOKEN"


@attrs.frozen
class ClusterConfig:
    """Everything needed to open a connection; PEM material is held as bytes."""

    server: str
    ca_pem: bytes | None = None
    client_cert_pem: bytes | None = None
    client_key_pem: bytes | None = attrs.field(default=None, repr=False)
    token: TokenSource | None = attrs.field(default=None, repr=False)
    insecure_skip_tls_verify: bool = False
    namespace: str = "default"
    source: str = ""
    allow_http_token: bool = False

    def check_transport(self) -> None:
        """Refuses to send a bearer token in clear text unless explicitly allowed."""
        if self.token is not None and self.server.startswith("http:") and not self.allow_http_token:
            raise ConfigError(
                f"{self.source or self.server}: refusing to send a bearer token over plain "
                f"http to {self.server}; use https, or set {ALLOW_HTTP_TOKEN_ENV}=true"
            )

    def ssl_context(self) -> ssl.SSLContext:
        """A client TLS context trusting ``ca_pem`` (or the system store) with any client cert."""
        if self.ca_pem:
            # A cluster CA replaces the system store, as in client-go: trust only the cluster.
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            try:
                ctx.load_verify_locations(cadata=self.ca_pem.decode())
            except (ssl.SSLError, ValueError) as exc:
                raise ConfigError(
                    f"{self.source or self.server}: CA data does not load: {exc}"
                ) from exc
        else:
            ctx = ssl.create_default_context()
        if self.insecure_skip_tls_verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.client_cert_pem and self.client_key_pem:
            _load_client_cert(ctx, self.client_cert_pem, self.client_key_pem)
        return ctx


def _load_client_cert(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    # ssl only loads key pairs from files; keep them in a private directory only while loading.
    with tempfile.TemporaryDirectory(prefix="nri-resmgr-tls-") as tmp:
        cert_path, key_path = Path(tmp, "cert.pem"), Path(tmp, "key.pem")
        for path, data in ((cert_path, cert), (key_path, key)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        try:
            ctx.load_cert_chain(cert_path, key_path)
        except ssl.SSLError as exc:
            raise ConfigError(f"client certificate/key do not load: {exc}") from exc


def load_config(
    kubeconfig: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    service_account_dir: Path = SERVICE_ACCOUNT_DIR,
) -> ClusterConfig:
    """The cluster access to use; see the module doc for the order of the sources."""
    env = os.environ if env is None else env
    if kubeconfig:
        config = load_kubeconfig([Path(kubeconfig)])
    elif env.get("KUBECONFIG"):
        config = load_kubeconfig([Path(p) for p in env["KUBECONFIG"].split(os.pathsep) if p])
    else:
        config = load_in_cluster(env=env, service_account_dir=service_account_dir)
    allow = env.get(ALLOW_HTTP_TOKEN_ENV, "").lower()
    if allow not in ("", "true", "false"):
        raise ConfigError(f"{ALLOW_HTTP_TOKEN_ENV}: expected true or false, got {allow!r}")
    config = attrs.evolve(config, allow_http_token=allow == "true")
    config.check_transport()
    return config


def load_in_cluster(
    *, env: Mapping[str, str] | None = None, service_account_dir: Path = SERVICE_ACCOUNT_DIR
) -> ClusterConfig:
    """The pod's service account: token (re-read on rotation), CA and namespace files."""
    env = os.environ if env is None else env
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise ConfigError(
            "no cluster access: not in a pod (KUBERNETES_SERVICE_HOST/PORT unset) "
            "and neither --kubeconfig nor KUBECONFIG given"
        )
    token_path = service_account_dir / "token"
    token = TokenFile(token_path)
    token.current()  # a missing or empty token is a startup error, not a first-request error
    ca_path = service_account_dir / "ca.crt"
    ns_path = service_account_dir / "namespace"
    return ClusterConfig(
        server=f"https://{_host_for_url(host)}:{port}",
        ca_pem=_read_file(ca_path, "service account CA"),
        token=token,
        namespace=ns_path.read_text().strip() if ns_path.exists() else "default",
        source=f"in-cluster ({service_account_dir})",
    )


def _host_for_url(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def load_kubeconfig(paths: list[Path], context: str | None = None) -> ClusterConfig:
    """A kubeconfig (several files merge: the first file to define a name wins)."""
    if not paths:
        raise ConfigError("kubeconfig: no file given")
    merged = _merge([(p, _read_yaml(p)) for p in paths])
    name = context or merged["current-context"]
    if not name:
        raise ConfigError(f"kubeconfig {_names(paths)}: current-context is not set")
    ctx = _named(merged, "contexts", name, paths)
    where = f"kubeconfig {_names(paths)} context {name!r}"
    cluster_name, user_name = _string(ctx, "cluster", where), _string(ctx, "user", where)
    if not cluster_name:
        raise ConfigError(f"kubeconfig {_names(paths)}: context {name!r} names no cluster")
    cluster = _named(merged, "clusters", cluster_name, paths)
    user = _named(merged, "users", user_name, paths) if user_name else {}
    return _config_from(cluster, user, ctx, f"kubeconfig {_names(paths)} context {name!r}")


def _config_from(
    cluster: dict[str, Any], user: dict[str, Any], ctx: dict[str, Any], source: str
) -> ClusterConfig:
    base = Path(cluster.get("_dir", "."))
    server = _string(cluster, "server", source)
    if not server:
        raise ConfigError(f"{source}: cluster has no server")
    if not server.startswith(("https://", "http://")):
        raise ConfigError(f"{source}: cluster server {_short(server)} is not an http(s) URL")
    for unsupported in ("exec", "auth-provider"):
        if unsupported in user:
            raise ConfigError(f"{source}: user '{unsupported}' credentials are not supported")
    udir = Path(user.get("_dir", base))
    insecure = _boolean(cluster, "insecure-skip-tls-verify", source)
    ca_pem = _pem(cluster, "certificate-authority", base, source)
    if insecure and ca_pem:
        # As client-go: a CA and "do not verify" contradict each other; do not guess which.
        raise ConfigError(
            f"{source}: insecure-skip-tls-verify together with a certificate-authority is "
            "not allowed"
        )
    return ClusterConfig(
        server=server.rstrip("/"),
        ca_pem=ca_pem,
        client_cert_pem=_pem(user, "client-certificate", udir, source),
        client_key_pem=_pem(user, "client-key", udir, source),
        token=_token(user, udir, source),
        insecure_skip_tls_verify=insecure,
        namespace=_string(ctx, "namespace", source) or "default",
        source=source,
    )


def _short(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def _string(section: dict[str, Any], key: str, source: str) -> str:
    """A string field ('' when absent); any other type is named, not stringified."""
    value = section.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ConfigError(f"{source}: {key}: expected a string, got {type(value).__name__}")
    return value


def _boolean(section: dict[str, Any], key: str, source: str) -> bool:
    value = section.get(key, False)
    if not isinstance(value, bool):
        raise ConfigError(f"{source}: {key}: expected true or false, got {_short(value)}")
    return value


def _pem(section: dict[str, Any], key: str, base: Path, source: str) -> bytes | None:
    data = _string(section, f"{key}-data", source)
    if data:
        try:
            return base64.b64decode(data, validate=True)
        except ValueError as exc:
            raise ConfigError(f"{source}: {key}-data is not valid base64") from exc
    path = _string(section, key, source)
    return _read_file(base / path, f"{source}: {key}") if path else None


def _token(user: dict[str, Any], base: Path, source: str) -> TokenSource | None:
    if _string(user, "token", source):
        return StaticToken(user["token"])
    if _string(user, "tokenFile", source):
        token = TokenFile(base / user["tokenFile"])
        token.current()
        return token
    if user.get("username") or user.get("password"):
        raise ConfigError(f"{source}: basic-auth users are not supported")
    return None


def _read_file(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{what}: cannot read {path}: {exc.strerror}") from exc


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = _read_file(path, "kubeconfig").decode()
    except UnicodeDecodeError as exc:
        raise ConfigError(f"kubeconfig {path}: not UTF-8 text") from exc
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"kubeconfig {path}: not valid YAML: {exc}") from exc
    if not isinstance(doc, dict):
        raise ConfigError(f"kubeconfig {path}: top level must be a mapping")
    return doc


def _merge(docs: list[tuple[Path, dict[str, Any]]]) -> dict[str, Any]:
    merged: dict[str, Any] = {"current-context": "", "clusters": {}, "contexts": {}, "users": {}}
    for path, doc in docs:
        where = f"kubeconfig {path}"
        merged["current-context"] = merged["current-context"] or _string(
            doc, "current-context", where
        )
        for section, inner in (("clusters", "cluster"), ("contexts", "context"), ("users", "user")):
            entries = doc.get(section) or []
            if not isinstance(entries, list):
                raise ConfigError(f"{where}: {section}: expected a list")
            for i, entry in enumerate(entries):
                if not isinstance(entry, dict) or "name" not in entry:
                    raise ConfigError(f"{where}: {section}[{i}] has no name")
                if not isinstance(entry["name"], str):
                    raise ConfigError(f"{where}: {section}[{i}].name: expected a string")
                inner_body = entry.get(inner) or {}
                if not isinstance(inner_body, dict):
                    raise ConfigError(f"{where}: {section}[{i}].{inner}: expected a mapping")
                body = dict(inner_body)
                body["_dir"] = str(path.parent)  # relative file paths resolve against their file
                merged[section].setdefault(entry["name"], body)
    return merged


def _named(merged: dict[str, Any], section: str, name: str, paths: list[Path]) -> dict[str, Any]:
    try:
        entry: dict[str, Any] = merged[section][name]
    except KeyError:
        raise ConfigError(f"kubeconfig {_names(paths)}: {section} has no entry {name!r}") from None
    return entry


def _names(paths: list[Path]) -> str:
    return os.pathsep.join(str(p) for p in paths)
