"""The control plane of the fleet: one real kube-apiserver + etcd with the chart installed.

The API server runs with its defaults where they matter here: API priority and fairness on,
``--max-requests-inflight 400`` and ``--max-mutating-requests-inflight 200``. The chart is
rendered by the real helm (DRA on) and applied as an operator would apply it: CRDs, the
ServiceAccount and its RBAC, the ResourceSlice admission policy, the DeviceClass, any
FlowSchema/PriorityLevelConfiguration, and the ``default`` config CR. Only the DaemonSet is
left out: the harness runs the agents itself.

Each node is registered the way kubelet would leave it (a Node object), with the agent's pod
bound to it, and gets its own service-account token bound to that pod: each agent then
authenticates as the chart's ServiceAccount with its node's name in its credentials, which is
what the chart's RBAC and admission policy are written for. None of this is measured: it is
what exists before the agents start.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx

from tests.helm.conftest import Helm
from tests.helm.crds import chart, documents
from tests.helm.helmbuild import HelmBuildError, ensure_helm
from tests.kube.apiserver import ADMIN_TOKEN, ApiServer, stable_port, start_apiserver
from tests.kube.nrt_crd import nrt_crd

NAMESPACE = "kube-system"
POLICY = "topology-aware"
ACCOUNT = f"nri-resmgr-{POLICY}"
CR_PATH = f"/apis/config.nri/v1alpha1/namespaces/{NAMESPACE}/topologyawarepolicies"

# The API server's own defaults, which the test fixture turns off (it has no use for
# priority and fairness); every other flag is the fixture's.
DEFAULT_FLAGS = (
    "--enable-priority-and-fairness=true",
    "--max-requests-inflight=400",
    "--max-mutating-requests-inflight=200",
)

KIND_PATHS = {
    "CustomResourceDefinition": "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
    "ServiceAccount": f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "Role": f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}/roles",
    "RoleBinding": f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}/rolebindings",
    "DeviceClass": "/apis/resource.k8s.io/v1/deviceclasses",
    "ValidatingAdmissionPolicy":
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding":
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
    "FlowSchema": "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas",
    "PriorityLevelConfiguration":
        "/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations",
    "TopologyAwarePolicy": CR_PATH,
}  # fmt: skip
SKIPPED_KINDS = {"DaemonSet"}


class SetupError(RuntimeError):
    """The control plane could not be set up (a peer missing, the chart refused)."""


def admin_client(server: ApiServer, base_url: str | None = None) -> httpx.Client:
    return httpx.Client(
        base_url=base_url or server.url,
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        verify=server.config().ssl_context(),
        timeout=60,
    )


@attrs.define
class Cluster:
    server: ApiServer
    admin: httpx.Client
    rendered: list[dict[str, Any]] = attrs.field(factory=list)
    tokens: dict[str, str] = attrs.field(factory=dict)
    twin: ApiServer | None = None

    @property
    def ca_pem(self) -> str:
        return (self.server.workdir / "ca.crt").read_text()

    def install_chart(self) -> None:
        self.rendered = render_chart()
        crds = [d for d in self.rendered if d["kind"] == "CustomResourceDefinition"]
        for crd in [*crds, nrt_crd()]:
            self.create(KIND_PATHS["CustomResourceDefinition"], crd)
            self.wait_established(crd["metadata"]["name"])
        for doc in self.rendered:
            kind = doc["kind"]
            if kind in SKIPPED_KINDS or kind == "CustomResourceDefinition":
                continue
            if kind not in KIND_PATHS:
                raise SetupError(f"the chart renders a {kind}, which the harness cannot apply")
            self.create(KIND_PATHS[kind], doc)

    def register_nodes(self, names: list[str]) -> dict[str, str]:
        """Node objects, the agent pod on each, and a token bound to that pod, per node."""
        for name in names:
            self.create("/api/v1/nodes", {"metadata": {"name": name}})
            pod = self.create(f"/api/v1/namespaces/{NAMESPACE}/pods", agent_pod(name))
            self.tokens[name] = self.bound_token(pod)
        return dict(self.tokens)

    def bound_token(self, pod: dict[str, Any]) -> str:
        meta = pod["metadata"]
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": 86400,
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                   "uid": meta["uid"]},
            },
        }  # fmt: skip
        path = f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{ACCOUNT}/token"
        return str(self.create(path, request)["status"]["token"])

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self.admin.post(path, json=body, params={"fieldValidation": "Strict"})
        if response.status_code not in (200, 201):
            raise SetupError(f"POST {path}: {response.status_code} {response.text[:500]}")
        created: dict[str, Any] = response.json()
        return created

    def wait_established(self, name: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        path = f"{KIND_PATHS['CustomResourceDefinition']}/{name}"
        while time.monotonic() < deadline:
            conditions = (self.admin.get(path).json().get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return
            time.sleep(0.2)
        raise SetupError(f"CRD {name} not established after {timeout}s")

    def config_cr(self, client: httpx.Client | None = None) -> dict[str, Any]:
        response = (client or self.admin).get(f"{CR_PATH}/default")
        response.raise_for_status()
        cr: dict[str, Any] = response.json()
        return cr

    def change_config(self, cpu: str, client: httpx.Client | None = None) -> int:
        """Sets the default CR's reserved CPU (one JSON patch); returns the new generation."""
        patch = [{"op": "replace", "path": "/spec/reservedResources/cpu", "value": cpu}]
        response = (client or self.admin).patch(
            f"{CR_PATH}/default", json=patch,
            headers={"Content-Type": "application/json-patch+json"},
        )  # fmt: skip
        response.raise_for_status()
        return int(response.json()["metadata"]["generation"])

    def start_twin(self) -> ApiServer:
        """A second API server on the same etcd (an HA replica): takes changes while the
        agents' one is down."""
        twin = attrs.evolve(self.server, port=stable_port(), api_proc=None)
        twin.start_apiserver_process()
        twin.wait_ready()
        self.twin = twin
        return twin

    def shutdown(self) -> None:
        self.admin.close()
        if self.twin is not None:
            self.twin.stop_apiserver()
        self.server.shutdown()


def agent_pod(node: str) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{ACCOUNT}-{node}", "namespace": NAMESPACE},
        "spec": {
            "nodeName": node,
            "serviceAccountName": ACCOUNT,
            "containers": [{"name": "nri-resmgr", "image": "nri-resmgr"}],
        },
    }


def render_chart() -> list[dict[str, Any]]:
    try:
        helm = Helm(ensure_helm())
    except HelmBuildError as exc:
        raise SetupError(f"helm cannot be built here: {exc}") from exc
    text = helm.template(chart(POLICY), "--include-crds", "--set", "config.dra.enabled=true")
    return documents(text)


@contextlib.contextmanager
def running_cluster(workdir: Path) -> Iterator[Cluster]:
    """The API server started with its default limits and the chart installed."""
    server = start_apiserver(workdir, flags=DEFAULT_FLAGS)  # a peer missing: fails under CI=true
    cluster = Cluster(server, admin_client(server))
    try:
        cluster.install_chart()
        yield cluster
    finally:
        cluster.shutdown()
