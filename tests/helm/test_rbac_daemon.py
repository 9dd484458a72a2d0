"""The daemon works under exactly the chart's RBAC and admission policies (issue 34 items 1
and 8): its service account's token, bound to a pod on its node, against a real
kube-apiserver holding the rendered ClusterRole, Role, bindings and admission policies.

test_apply.py shows what the account may not do; this shows that what is left is enough:
the daemon (topology-aware, DRA and NodeResourceTopology on) follows its config CR and
writes its status, publishes its node's NodeResourceTopology object and ResourceSlice, and
reads the claims kubelet names, with no request refused.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from nri_resmgr.sim.synthetic import N4C16, write_sysfs
from tests.agent.test_dra_process import kubelet_dirs  # noqa: F401  (fixture)
from tests.dra.conftest import kubelet_stubs  # noqa: F401  (fixture)
from tests.dra.kubelet_client import Kubelet, KubeletStubs
from tests.helm.conftest import DRA_STATES, NAMESPACE, Helm
from tests.helm.crds import chart, documents
from tests.helm.test_apply import (
    CORE_PATHS,
    NRTS,
    SLICES,
    VAP_BINDING_PATH,
    VAP_PATH,
    client,
    create,
    nrt_crd_or_missing,
    server,  # noqa: F401  (fixture: this module's own API server)
    wait_established,
)
from tests.kube.apiserver import ApiServer

pytestmark = pytest.mark.integration

POLICY = "topology-aware"
ACCOUNT = f"nri-resmgr-{POLICY}"
DRIVER = f"{POLICY}.nri.io"
NODE = "node-1"
CLAIM = "0b6f1c2e-9d4a-4e57-8a3b-2c1d5e6f7a80"
GUARD = 60.0  # a hang guard, not a timing assertion
PATHS = {
    **CORE_PATHS,
    "ValidatingAdmissionPolicy": VAP_PATH,
    "ValidatingAdmissionPolicyBinding": VAP_BINDING_PATH,
    "DeviceClass": "/apis/resource.k8s.io/v1/deviceclasses",
    "FlowSchema": "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas",
    "PriorityLevelConfiguration": "/apis/flowcontrol.apiserver.k8s.io/v1/"
    "prioritylevelconfigurations",
    "TopologyAwarePolicy": f"/apis/config.nri/v1alpha1/namespaces/{NAMESPACE}/"
    "topologyawarepolicies",
}


def install(api: httpx.Client, helm: Helm) -> None:
    """The chart (DRA on, no HTTP endpoint), as helm would install it, plus the NRT CRD."""
    args = (*DRA_STATES["enabled"], "--set", "config.instrumentation.httpEndpoint=")
    docs = documents(helm.template(chart(POLICY), "--include-crds", *args))
    crds = [nrt_crd_or_missing()] + [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    for crd in crds:
        response = create(api, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        assert response.status_code == 201, response.text
        wait_established(api, crd["metadata"]["name"])
    for doc in docs:
        if doc["kind"] == "CustomResourceDefinition":
            continue
        response = create(api, PATHS[doc["kind"]].format(ns=NAMESPACE), doc)
        assert response.status_code == 201, (doc["kind"], response.text)


def pod_token(api: httpx.Client) -> str:
    """A token of the chart's service account bound to a pod on NODE, as kubelet gets one."""
    assert create(api, "/api/v1/nodes", {"metadata": {"name": NODE}}).status_code == 201
    pod = {"metadata": {"name": "agent", "namespace": NAMESPACE},
           "spec": {"nodeName": NODE, "serviceAccountName": ACCOUNT,
                    "containers": [{"name": "agent", "image": "nri-resmgr"}]}}  # fmt: skip
    created = create(api, f"/api/v1/namespaces/{NAMESPACE}/pods", pod)
    assert created.status_code == 201, created.text
    request = {"spec": {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "agent",
                                           "uid": created.json()["metadata"]["uid"]},
                        "expirationSeconds": 3600}}  # fmt: skip
    path = f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{ACCOUNT}/token"
    response = api.post(path, json=request)
    assert response.status_code == 201, response.text
    token: str = response.json()["status"]["token"]
    return token


def kubeconfig(api: ApiServer, token: str, path: Path) -> Path:
    path.write_text(f"""apiVersion: v1
kind: Config
current-context: agent
clusters: [{{name: test, cluster: {{server: "{api.url}",
            certificate-authority: "{api.workdir / "ca.crt"}"}}}}]
contexts: [{{name: agent, context: {{cluster: test, user: agent}}}}]
users: [{{name: agent, user: {{token: "{token}"}}}}]
""")
    return path


def until(check: Any, what: str) -> Any:
    deadline = time.monotonic() + GUARD
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"no {what} within {GUARD} s")


async def test_the_daemon_does_its_work_with_only_the_charts_permissions(
    server: ApiServer,  # noqa: F811
    helm: Helm,
    kubelet_stubs: KubeletStubs,  # noqa: F811
    kubelet_dirs: tuple[Path, Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    plugins, registry = kubelet_dirs
    with client(server) as admin:
        install(admin, helm)
        token = pod_token(admin)
    config = kubeconfig(server, token, tmp_path / "agent.kubeconfig")
    host = write_sysfs(tmp_path / "host", N4C16)
    log = tmp_path / "daemon.log"
    args = [sys.executable, "-m", "nri_resmgr", "--policy", POLICY, "--kubeconfig", str(config),
            "--config-namespace", NAMESPACE, "--host-root", str(host),
            "--nri-socket", str(tmp_path / "no-runtime.sock"),
            "--kubelet-plugins-dir", str(plugins), "--kubelet-registry-dir", str(registry),
            "--cdi-dir", str(tmp_path / "cdi"),
            "--dra-state-dir", str(tmp_path / "state")]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"} | {"NODE_NAME": NODE}
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=out, env=env)
    kubelet = Kubelet(kubelet_stubs)
    try:
        with client(server) as admin:
            cr = PATHS["TopologyAwarePolicy"] + "/default"

            def status() -> Any:
                nodes = (admin.get(cr).json().get("status") or {}).get("nodes") or {}
                return nodes.get(NODE)

            assert until(status, "status entry")["status"] == "Success"
            nrt = until(lambda: admin.get(f"{NRTS}/{NODE}").status_code == 200, "NRT object")
            assert nrt
            slices = until(
                lambda: (
                    admin.get(SLICES, params={"fieldSelector": f"spec.nodeName={NODE}"})
                    .json()
                    .get("items")
                ),
                "ResourceSlice",
            )
            assert slices[0]["spec"]["driver"] == DRIVER
            dra_socket = plugins / DRIVER / "dra.sock"
            reply = await kubelet.prepare("v1", kubelet.channel(dra_socket), CLAIM)
            # Read with the account's claims/get: not found, not forbidden.
            assert f"ResourceClaim default/claim-{CLAIM} not found" in reply.claims[CLAIM].error
        await trio.sleep(0.5)
        assert proc.poll() is None, log.read_text()
    finally:
        kubelet.close()
        proc.kill()
        proc.wait()
    output = log.read_text(errors="replace")
    for refused in ("forbidden", "Forbidden", " 403", "denied request"):
        assert refused not in output, output[-3000:]
