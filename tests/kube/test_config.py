"""Cluster access from kubeconfig files and from an in-cluster service account."""

from __future__ import annotations

import base64
import ssl
import subprocess
from pathlib import Path

import pytest

from nri_resmgr.errors import ConfigError
from nri_resmgr.kube import ClusterConfig, KubeClient, load_config, load_kubeconfig
from nri_resmgr.kube.auth import StaticToken, TokenFile

CA_PEM = b"-----BEGIN CERTIFICATE-----\nnot-checked-here\n-----END CERTIFICATE-----\n"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


KUBECONFIG = """
apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: c1
  cluster:
    server: https://10.1.2.3:6443/
    certificate-authority: certs/ca.crt
- name: c2
  cluster: {{server: "https://other:443", insecure-skip-tls-verify: true}}
contexts:
- name: dev
  context: {{cluster: c1, user: u1, namespace: team}}
- name: other
  context: {{cluster: c2, user: u2}}
users:
- name: u1
  user: {{token: abc}}
- name: u2
  user: {{tokenFile: tok, client-certificate-data: {cert}, client-key-data: {key}}}
"""


def test_current_context_with_relative_ca_file(tmp_path: Path) -> None:
    (tmp_path / "certs").mkdir()
    (tmp_path / "certs" / "ca.crt").write_bytes(CA_PEM)
    path = _write(tmp_path / "config", KUBECONFIG.format(cert="", key=""))
    cfg = load_config(str(path), env={})
    assert cfg.server == "https://10.1.2.3:6443"
    assert cfg.ca_pem == CA_PEM
    assert cfg.token == StaticToken("abc")
    assert cfg.namespace == "team"
    assert not cfg.insecure_skip_tls_verify


def test_other_context_with_token_file_and_inline_cert(tmp_path: Path) -> None:
    (tmp_path / "tok").write_text("from-file\n")
    text = KUBECONFIG.format(cert=_b64(b"CERT"), key=_b64(b"KEY"))
    cfg = load_kubeconfig([_write(tmp_path / "config", text)], context="other")
    assert cfg.insecure_skip_tls_verify
    assert cfg.client_cert_pem == b"CERT"
    assert cfg.client_key_pem == b"KEY"
    assert isinstance(cfg.token, TokenFile)
    assert cfg.token.current() == "from-file"
    assert cfg.namespace == "default"


def test_kubeconfig_env_list_merges_first_wins(tmp_path: Path) -> None:
    (tmp_path / "certs").mkdir()
    (tmp_path / "certs" / "ca.crt").write_bytes(CA_PEM)
    first = _write(
        tmp_path / "a",
        "current-context: mine\ncontexts:\n- name: mine\n  context: {cluster: c1, user: u1}\n"
        "users:\n- name: u1\n  user: {token: first}\n",
    )
    second = _write(tmp_path / "b", KUBECONFIG.format(cert="", key=""))
    cfg = load_config(None, env={"KUBECONFIG": f"{first}:{second}"})
    assert cfg.token == StaticToken("first")
    assert cfg.server == "https://10.1.2.3:6443"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("current-context: ''\n", "current-context is not set"),
        ("current-context: x\n", "contexts has no entry 'x'"),
        ("current-context: x\ncontexts:\n- name: x\n  context: {cluster: nope}\n",
         "clusters has no entry 'nope'"),
        ("current-context: x\ncontexts:\n- name: x\n  context: {cluster: c}\n"
         "clusters:\n- name: c\n  cluster: {}\n", "cluster has no server"),
        ("current-context: x\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\n"
         "clusters:\n- name: c\n  cluster: {server: 'https://s'}\n"
         "users:\n- name: u\n  user: {exec: {command: aws}}\n", "'exec' credentials"),
        ("- just\n- a list\n", "top level must be a mapping"),
        ("clusters:\n- cluster: {}\n", "clusters[0] has no name"),
        ("a: [unclosed\n", "not valid YAML"),
    ],
)  # fmt: skip
def test_bad_kubeconfig_names_the_problem(tmp_path: Path, text: str, problem: str) -> None:
    path = _write(tmp_path / "config", text)
    with pytest.raises(ConfigError, match=problem.replace("[", r"\[").replace("(", r"\(")):
        load_kubeconfig([path])


def test_missing_kubeconfig_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read .*/absent"):
        load_config(str(tmp_path / "absent"), env={})


def test_in_cluster_from_service_account(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "ca.crt").write_bytes(CA_PEM)
    (tmp_path / "namespace").write_text("nri\n")
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    cfg = load_config("", env=env, service_account_dir=tmp_path)
    assert cfg.server == "https://[fd00::1]:443"
    assert cfg.ca_pem == CA_PEM
    assert cfg.namespace == "nri"
    assert isinstance(cfg.token, TokenFile)
    assert cfg.token.current() == "sa-token"


def test_no_cluster_access_at_all_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="KUBERNETES_SERVICE_HOST"):
        load_config(None, env={}, service_account_dir=tmp_path)


def test_in_cluster_without_token_fails_at_load(tmp_path: Path) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(ConfigError, match=r"token file .*token"):
        load_config(None, env=env, service_account_dir=tmp_path)


def test_client_certificate_loads_into_tls_context(tmp_path: Path) -> None:
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", "k.pem", "-out", "c.pem", "-days", "1", "-subj", "/CN=me"],
        cwd=tmp_path, check=True, capture_output=True,
    )  # fmt: skip
    cert, key = (tmp_path / "c.pem").read_bytes(), (tmp_path / "k.pem").read_bytes()
    text = (
        "current-context: x\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\n"
        "clusters:\n- name: c\n  cluster: {server: 'https://s', certificate-authority: c.pem}\n"
        f"users:\n- name: u\n  user: {{client-certificate: c.pem, client-key-data: {_b64(key)}}}\n"
    )
    cfg = load_kubeconfig([_write(tmp_path / "config", text)])
    assert cfg.client_cert_pem == cert
    ctx = cfg.ssl_context()
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert [c["subject"] for c in ctx.get_ca_certs()] == [((("commonName", "me"),),)]
    with pytest.raises(ConfigError, match="CA data does not load"):
        cfg.__class__(server="https://s", ca_pem=CA_PEM).ssl_context()
    bad = cfg.__class__(server="https://s", client_cert_pem=cert, client_key_pem=b"junk")
    with pytest.raises(ConfigError, match="client certificate/key"):
        bad.ssl_context()


def _one_cluster(cluster: str, user: str = "{token: abc}") -> str:
    return (
        "current-context: x\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\n"
        f"clusters:\n- name: c\n  cluster: {cluster}\nusers:\n- name: u\n  user: {user}\n"
    )


@pytest.mark.parametrize("quoted", ['"false"', '"true"', "'no'", "0", "1"])
def test_a_quoted_insecure_flag_is_refused_not_read_as_true(tmp_path: Path, quoted: str) -> None:
    text = _one_cluster(f"{{server: 'https://s', insecure-skip-tls-verify: {quoted}}}")
    with pytest.raises(ConfigError, match="insecure-skip-tls-verify: expected true or false"):
        load_kubeconfig([_write(tmp_path / "config", text)])


def test_insecure_together_with_a_ca_is_refused(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_bytes(CA_PEM)
    text = _one_cluster(
        "{server: 'https://s', certificate-authority: ca.crt, insecure-skip-tls-verify: true}"
    )
    with pytest.raises(ConfigError, match="together with a certificate-authority"):
        load_kubeconfig([_write(tmp_path / "config", text)])


def test_a_token_is_not_sent_over_plain_http_without_the_opt_in(tmp_path: Path) -> None:
    path = _write(tmp_path / "config", _one_cluster("{server: 'http://10.0.0.1:8080'}"))
    with pytest.raises(ConfigError, match="refusing to send a bearer token over plain http"):
        load_config(str(path), env={})
    with pytest.raises(ConfigError, match="refusing"):
        KubeClient(ClusterConfig(server="http://10.0.0.1:8080", token=StaticToken("t")))
    allowed = load_config(str(path), env={"NRI_RESMGR_ALLOW_HTTP_TOKEN": "true"})
    assert allowed.allow_http_token
    with pytest.raises(ConfigError, match="expected true or false"):
        load_config(str(path), env={"NRI_RESMGR_ALLOW_HTTP_TOKEN": "yes"})
    # Without a token plain http is just a transport choice.
    no_token = _write(tmp_path / "anon", _one_cluster("{server: 'http://10.0.0.1'}", "{}"))
    assert load_config(str(no_token), env={}).server == "http://10.0.0.1"


def test_secrets_stay_out_of_reprs(tmp_path: Path) -> None:
    (tmp_path / "tok").write_text("file-secret-token\n")
    config = ClusterConfig(
        server="https://s", client_key_pem=b"PRIVATE-KEY-BYTES", token=StaticToken("s3cr3t")
    )
    token_file = TokenFile(tmp_path / "tok")
    token_file.current()
    shown = repr(config) + repr(StaticToken("s3cr3t")) + repr(token_file)
    for secret in ("s3cr3t", "PRIVATE-KEY-BYTES", "file-secret-token"):
        assert secret not in shown
    assert "https://s" in shown and "tok" in shown


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (_one_cluster("{server: 6443}"), "server: expected a string, got int"),
        (_one_cluster("[not, a, mapping]"), r"clusters\[0\].cluster: expected a mapping"),
        (_one_cluster("{server: 'https://s'}", "{token: [a, b]}"), "token: expected a string"),
        (_one_cluster("{server: 'https://s', certificate-authority: {a: 1}}"),
         "certificate-authority: expected a string"),
        (_one_cluster("{server: 's:443'}"), "is not an http"),
        ("current-context: [x]\n", "current-context: expected a string"),
        ("clusters: {c: {}}\n", "clusters: expected a list"),
        ("current-context: x\ncontexts:\n- name: 7\n  context: {}\n", r"contexts\[0\].name"),
        ("current-context: x\ncontexts:\n- name: x\n  context: {cluster: [c]}\n",
         "cluster: expected a string"),
    ],
)  # fmt: skip
def test_malformed_kubeconfig_shapes_are_config_errors(
    tmp_path: Path, text: str, problem: str
) -> None:
    with pytest.raises(ConfigError, match=problem):
        load_kubeconfig([_write(tmp_path / "config", text)])


def test_a_binary_kubeconfig_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_kubeconfig([path])
