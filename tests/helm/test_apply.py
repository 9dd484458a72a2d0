"""The rendered charts against a real kube-apiserver (tests/kube/apiserver.py).

The CRDs and RBAC are created with strict field validation. The sample configs are then
created, and the agent's ServiceAccount is impersonated to prove that the RBAC grants what
the agent does and no more, with ResourceSlice access exactly when DRA is on.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helm.conftest import DRA_STATES, NAMESPACE, Helm
from tests.helm.crds import CONFIGS, POLICIES, chart, documents, load_sample
from tests.helm.test_crd_schema import SCHEMA_REJECTS
from tests.kube.apiserver import ADMIN_TOKEN, ApiServer, start_apiserver
from tests.kube.gobuild import BuildError
from tests.kube.nrt_crd import nrt_crd
from tests.peers import missing_peer

pytestmark = pytest.mark.integration

CORE_PATHS = {
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    "DaemonSet": "/apis/apps/v1/namespaces/{ns}/daemonsets",
    "NetworkPolicy": "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
}
PLURALS = {"TopologyAwarePolicy": "topologyawarepolicies", "BalloonsPolicy": "balloonspolicies"}


def plural(kind: str) -> str:
    return PLURALS.get(kind, "templatepolicies")


def cr_path(kind: str, name: str = "") -> str:
    base = f"/apis/config.nri/v1alpha1/namespaces/{NAMESPACE}/{plural(kind)}"
    return f"{base}/{name}" if name else base


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    api = start_apiserver(tmp_path_factory.mktemp("helm-apiserver"))
    try:
        yield api
    finally:
        api.shutdown()


def client(server: ApiServer, account: str | None = None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    if account:
        headers["Impersonate-User"] = f"system:serviceaccount:{NAMESPACE}:{account}"
        headers["Impersonate-Group"] = "system:serviceaccounts"
    return httpx.Client(
        base_url=server.url, headers=headers, verify=server.config().ssl_context(), timeout=30
    )


def create(api: httpx.Client, path: str, body: dict[str, Any]) -> httpx.Response:
    return api.post(path, json=body, params={"fieldValidation": "Strict"})


def message(response: httpx.Response) -> str:
    """The API server's Status message, or the raw body when it is not a Status."""
    try:
        return str(response.json().get("message", response.text))
    except ValueError:
        return response.text


def wait_established(api: httpx.Client, name: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        crd = api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}").json()
        conditions = (crd.get("status") or {}).get("conditions") or []
        if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            return
        time.sleep(0.2)
    raise AssertionError(f"CRD {name} not established")


@pytest.fixture(scope="module")
def installed(server: ApiServer, helm: Helm) -> dict[str, list[dict[str, Any]]]:
    """Every chart's CRD and objects (DRA unset) created as the admin; the renders by policy."""
    renders = {}
    with client(server) as api:
        for policy in POLICIES:
            docs = documents(helm.template(chart(policy), "--include-crds"))
            renders[policy] = docs
            for doc in docs:
                if doc["kind"] == "CustomResourceDefinition":
                    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
                    assert create(api, path, doc).status_code == 201, doc["metadata"]["name"]
                    wait_established(api, doc["metadata"]["name"])
            for doc in docs:
                if doc["kind"] in CORE_PATHS:
                    response = create(api, CORE_PATHS[doc["kind"]].format(ns=NAMESPACE), doc)
                    assert response.status_code == 201, response.text
                elif doc["apiVersion"] == "config.nri/v1alpha1":
                    response = create(api, cr_path(doc["kind"]), doc)
                    assert response.status_code == 201, response.text
    for policy, docs in renders.items():
        kind = next(d for d in docs if d["apiVersion"] == "config.nri/v1alpha1")["kind"]
        with client(server, f"nri-resmgr-{policy}") as agent:
            assert _eventually(functools.partial(can_list, agent, cr_path(kind)))
    return renders


@pytest.mark.parametrize("sample", POLICIES)
def test_api_server_accepts_good_samples(
    server: ApiServer, installed: dict[str, Any], sample: str
) -> None:
    document = load_sample(CONFIGS / f"{sample}.yaml")
    document["metadata"] = {"name": f"sample-{sample}", "namespace": NAMESPACE}
    with client(server) as api:
        response = create(api, cr_path(document["kind"]), document)
    assert response.status_code == 201, response.text


# What the real API server says to each bad sample (strict field validation, as kubectl).
API_REJECTS = {
    "bad-cpu-quantity.yaml": "spec.reservedResources.cpu in body should match",
    "bad-enum.yaml": 'spec.defaultCPUPriority: Unsupported value: "urgent"',
    "balloon-missing-name.yaml": "spec.balloonTypes[0].name: Required value",
    "duplicate-balloon.yaml": "spec.balloonTypes[1]: Duplicate value",
    "missing-reserved.yaml": 'unknown field "spec.pinCPU"',
    "spec-not-mapping.yaml": "spec in body must be of type object",
    "unknown-key.yaml": 'unknown field "spec.pinCPUs"',
    "unknown-nested-key.yaml": 'unknown field "spec.dra.enabeld"',
    "wrong-api-version.yaml": "404",
    "wrong-bool.yaml": "spec.dra.enabled in body must be of type boolean",
    "wrong-int.yaml": "spec.balloonTypes[0].maxCPUs in body must be of type integer",
    "wrong-kind.yaml": "must be TemplatePolicy",
    "wrong-list.yaml": "spec.reservedPoolNamespaces in body must be of type array",
}


def test_api_rejections_cover_the_schema_rejections() -> None:
    assert set(API_REJECTS) == set(SCHEMA_REJECTS)


@pytest.mark.parametrize("name", sorted(API_REJECTS))
def test_api_server_rejects_what_the_schema_rejects(
    server: ApiServer, installed: dict[str, Any], name: str
) -> None:
    document = load_sample(CONFIGS / "bad" / name)
    document["metadata"] = {"name": f"bad-{Path(name).stem}", "namespace": NAMESPACE}
    group_version = document["apiVersion"]
    path = f"/apis/{group_version}/namespaces/{NAMESPACE}/{plural(document['kind'])}"
    with client(server) as api:
        response = create(api, path, document)
    assert response.status_code in (400, 404, 422)
    assert API_REJECTS[name] in f"{response.status_code} {message(response)}"


@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        ({"log": {"source": True}}, "spec.reservedResources: Required value"),
        ({"reservedResources": {}}, "spec.reservedResources.cpu: Required value"),
        ({"reservedResources": {"cpu": 2, "memory": "1Gi"}}, None),
    ],
)
def test_api_server_requires_reserved_cpu(
    server: ApiServer, installed: dict[str, Any], spec: dict[str, Any], complaint: str | None
) -> None:
    document = {
        "apiVersion": "config.nri/v1alpha1",
        "kind": "TemplatePolicy",
        "metadata": {"name": f"reserved-{len(str(spec))}", "namespace": NAMESPACE},
        "spec": spec,
    }
    with client(server) as api:
        response = create(api, cr_path("TemplatePolicy"), document)
    if complaint is None:
        assert response.status_code == 201, response.text
    else:
        assert response.status_code == 422
        assert complaint in message(response)


def slice_body(policy: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"node-1-{policy}"},
        "spec": {
            "driver": f"{policy}.nri.io",
            "nodeName": "node-1",
            "pool": {"name": "node-1", "generation": 1, "resourceSliceCount": 1},
            "devices": [],
        },
    }


def create_slice(api: httpx.Client, policy: str) -> int:
    response = api.post(
        "/apis/resource.k8s.io/v1/resourceslices",
        json=slice_body(policy),
        params={"dryRun": "All"},
    )
    return response.status_code


@pytest.mark.parametrize("policy", POLICIES)
def test_service_account_can_do_what_the_agent_does_and_no_more(
    server: ApiServer, helm: Helm, installed: dict[str, list[dict[str, Any]]], policy: str
) -> None:
    kind = next(d for d in installed[policy] if d["apiVersion"] == "config.nri/v1alpha1")["kind"]
    account = f"nri-resmgr-{policy}"
    status = {"status": {"nodes": {"node-1": {"status": "Success", "generation": 1, "errors": ""}}}}
    with client(server, account) as agent:
        # What the agent does: list and watch its CRs (by name: a field selector), its Node
        # too, and merge-patch the status. Nothing else, not even a GET (item 8 of issue 34).
        by_name = {"fieldSelector": "metadata.name=default"}
        assert agent.get(cr_path(kind), params=by_name).status_code == 200
        watch = {**by_name, "watch": "1", "timeoutSeconds": "1"}
        assert agent.get(cr_path(kind), params=watch).status_code == 200
        node_watch = {"fieldSelector": "metadata.name=node-1", "watch": "1", "timeoutSeconds": "1"}
        assert agent.get("/api/v1/nodes", params=node_watch).status_code == 200
        merge = {"Content-Type": "application/merge-patch+json"}
        patched = agent.patch(cr_path(kind, "default") + "/status", json=status, headers=merge)
        assert patched.status_code == 200, patched.text
        assert patched.json()["status"]["nodes"]["node-1"]["status"] == "Success"
        assert agent.get(cr_path(kind, "default")).status_code == 403
        assert agent.get(cr_path(kind, "default") + "/status").status_code == 403
        assert (
            agent.put(cr_path(kind, "default") + "/status", json=patched.json()).status_code == 403
        )
        assert agent.get("/api/v1/nodes/node-1").status_code == 403  # only the DRA publisher
        assert (
            agent.patch(cr_path(kind, "default"), json={"spec": {}}, headers=merge).status_code
            == 403
        )
        assert agent.delete(cr_path(kind, "default")).status_code == 403
        assert agent.get(f"/api/v1/namespaces/{NAMESPACE}/secrets").status_code == 403
        assert create_slice(agent, policy) == 403

    enabled = documents(helm.template(chart(policy), *DRA_STATES["enabled"]))
    (role,) = [d for d in enabled if d["kind"] == "ClusterRole"]
    with client(server) as admin:
        path = f"{CORE_PATHS['ClusterRole']}/{role['metadata']['name']}"
        assert admin.put(path, json=role).status_code == 200
    try:
        with client(server, account) as agent:
            assert _eventually(lambda: create_slice(agent, policy) == 201)
            listed = agent.get("/apis/resource.k8s.io/v1/resourceslices")
            assert listed.status_code == 200
            assert agent.get("/api/v1/nodes/node-1").status_code == 404  # allowed: no node
    finally:
        (plain,) = [d for d in installed[policy] if d["kind"] == "ClusterRole"]
        with client(server) as admin:
            current = admin.get(path).json()
            plain = {
                **plain,
                "metadata": {
                    **plain["metadata"],
                    "resourceVersion": current["metadata"]["resourceVersion"],
                },
            }
            assert admin.put(path, json=plain).status_code == 200


def can_list(api: httpx.Client, path: str) -> bool:
    return api.get(path).status_code == 200


def _eventually(check: Any, timeout: float = 10.0) -> bool:
    """RBAC changes reach the authorizer through an informer: poll briefly."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False


VAP_PATH = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
VAP_BINDING_PATH = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
NODE_NAME_EXTRA = "Impersonate-Extra-authentication.kubernetes.io%2Fnode-name"


def agent_on(server: ApiServer, account: str, node: str | None) -> httpx.Client:
    """The agent's service account as its pod's bound token shows it: with its node's name."""
    api = client(server, account)
    if node is not None:
        api.headers[NODE_NAME_EXTRA] = node
    return api


def node_slice(policy: str, node: str, name: str | None = None) -> dict[str, Any]:
    body = slice_body(policy)
    body["metadata"]["name"] = name or f"{node}-{policy}"
    body["spec"] |= {"nodeName": node, "pool": {"name": node, "generation": 1,
                                                "resourceSliceCount": 1}}  # fmt: skip
    return body


@pytest.mark.parametrize("policy", ["template"])
def test_with_dra_the_agent_writes_only_its_own_nodes_slices(
    server: ApiServer, helm: Helm, installed: dict[str, list[dict[str, Any]]], policy: str
) -> None:
    account = f"nri-resmgr-{policy}"
    enabled = documents(helm.template(chart(policy), *DRA_STATES["enabled"]))
    (role,) = [d for d in enabled if d["kind"] == "ClusterRole"]
    (vap,) = [d for d in enabled if d["kind"] == "ValidatingAdmissionPolicy"
              and d["metadata"]["name"].endswith("-resourceslices")]  # fmt: skip
    (binding,) = [d for d in enabled if d["kind"] == "ValidatingAdmissionPolicyBinding"
                  and d["metadata"]["name"].endswith("-resourceslices")]  # fmt: skip
    role_path = f"{CORE_PATHS['ClusterRole']}/{role['metadata']['name']}"
    with client(server) as admin:
        current = admin.get(role_path).json()["metadata"]["resourceVersion"]
        role = {**role, "metadata": {**role["metadata"], "resourceVersion": current}}
        assert admin.put(role_path, json=role).status_code == 200
        assert create(admin, VAP_PATH, vap).status_code == 201
        assert create(admin, VAP_BINDING_PATH, binding).status_code == 201
        # Slices of another node and of the agent's node, written by the admin (not matched).
        for node in ("node-2", "node-1"):
            created = create(admin, SLICES, node_slice(policy, node, f"{node}-existing"))
            assert created.status_code == 201, created.text
    try:
        with agent_on(server, account, "node-1") as agent:
            # The policy is enforced once the API server has compiled it: poll.
            assert _eventually(
                lambda: dry_run_create(agent, node_slice(policy, "node-2")) != 201, timeout=30
            )
            denied = dry_run_create(agent, node_slice(policy, "node-2"), full=True)
            assert "may only write ResourceSlices of its own node" in message(denied)
            assert dry_run_create(agent, node_slice(policy, "node-1")) == 201
            other = node_slice(policy, "node-1")
            other["spec"]["driver"] = "gpu.example.com"
            assert dry_run_create(agent, other) != 201

            assert agent.get(f"{SLICES}/node-2-existing").status_code == 403  # no get: lists
            with client(server) as admin:
                theirs = admin.get(f"{SLICES}/node-2-existing").json()
            theirs["spec"]["pool"]["generation"] = 2  # rewriting another node's slice
            put = agent.put(f"{SLICES}/node-2-existing", json=theirs, params={"dryRun": "All"})
            assert put.status_code != 200, put.text
            assert "its own node" in message(put)
            delete = agent.delete(f"{SLICES}/node-2-existing", params={"dryRun": "All"})
            assert delete.status_code != 200, delete.text
            assert "its own node" in message(delete)
            own = agent.delete(f"{SLICES}/node-1-existing", params={"dryRun": "All"})
            assert own.status_code == 200, own.text
            # What RBAC no longer grants: patch (the publisher replaces whole objects).
            merge = {"Content-Type": "application/merge-patch+json"}
            patched = agent.patch(f"{SLICES}/node-1-existing", json={}, headers=merge)
            assert patched.status_code == 403
        with agent_on(server, account, None) as nodeless:
            refused = dry_run_create(nodeless, node_slice(policy, "node-1"), full=True)
            assert "name no node" in message(refused)
    finally:
        with client(server) as admin:
            for path in (f"{VAP_BINDING_PATH}/{binding['metadata']['name']}",
                         f"{VAP_PATH}/{vap['metadata']['name']}",
                         f"{SLICES}/node-1-existing", f"{SLICES}/node-2-existing"):  # fmt: skip
                admin.delete(path)
            (plain,) = [d for d in installed[policy] if d["kind"] == "ClusterRole"]
            current = admin.get(role_path).json()["metadata"]["resourceVersion"]
            plain = {**plain, "metadata": {**plain["metadata"], "resourceVersion": current}}
            assert admin.put(role_path, json=plain).status_code == 200


def dry_run_create(api: httpx.Client, body: dict[str, Any], full: bool = False) -> Any:
    response = api.post(SLICES, json=body, params={"dryRun": "All"})
    return response if full else response.status_code


@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        ({"control": {"rdt": {"classes": {f"c{i}": {} for i in range(300)}}}},
         "spec.control.rdt.classes: Too many: 300: must have at most 256 items"),
        ({"control": {"blockio": {"options": {f"o{i}": i for i in range(257)}}}},
         "must have at most 256 items"),
        ({"reservedResources": {"cpu": "cpuset:" + ",".join(["0-65536"] * 600)}},
         "spec.reservedResources.cpu: Too long"),
    ],
)  # fmt: skip
def test_api_server_bounds_free_form_fields_and_cpu_values(
    server: ApiServer, installed: dict[str, Any], spec: dict[str, Any], complaint: str
) -> None:
    document = {
        "apiVersion": "config.nri/v1alpha1",
        "kind": "TemplatePolicy",
        "metadata": {"name": "bounded", "namespace": NAMESPACE},
        "spec": {"reservedResources": {"cpu": "1"}} | spec,
    }
    with client(server) as api:
        response = create(api, cr_path("TemplatePolicy"), document)
    assert response.status_code == 422, response.text[:300]
    assert complaint in message(response)


@pytest.mark.parametrize("peers", ["[]", '[{"podSelector": {"matchLabels": {"app": "prom"}}}]'])
def test_the_api_server_accepts_the_network_policy(
    server: ApiServer, helm: Helm, peers: str
) -> None:
    docs = documents(helm.template(chart("template"), "--set", "networkPolicy.enabled=true",
                                   "--set-json", f"networkPolicy.from={peers}"))  # fmt: skip
    (netpol,) = [d for d in docs if d["kind"] == "NetworkPolicy"]
    with client(server) as api:
        path = CORE_PATHS["NetworkPolicy"].format(ns=NAMESPACE)
        response = api.post(path, json=netpol, params={"fieldValidation": "Strict",
                                                       "dryRun": "All"})  # fmt: skip
    assert response.status_code == 201, response.text


NRTS = "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies"


def nrt(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "topology.node.k8s.io/v1alpha2",
        "kind": "NodeResourceTopology",
        "metadata": {"name": name},
        "topologyPolicies": ["None"],
        "attributes": [{"name": "TopologyPolicy", "value": "template"}],
        "zones": [],
    }


def apply_nrt(api: httpx.Client, body: dict[str, Any]) -> httpx.Response:
    """A dry-run server-side apply of an NRT object, as the agent's NRT writer sends it."""
    return api.patch(f"{NRTS}/{body['metadata']['name']}", content=json.dumps(body),
                     params={"dryRun": "All", "fieldManager": "nri-resmgr", "force": "true"},
                     headers={"Content-Type": "application/apply-patch+yaml"})  # fmt: skip


def nrt_crd_or_missing() -> dict[str, Any]:
    try:
        return nrt_crd()
    except BuildError as exc:
        missing_peer(str(exc))


@pytest.mark.parametrize("policy", ["template"])
def test_the_agent_writes_only_its_own_nodes_noderesourcetopology(
    server: ApiServer, helm: Helm, installed: dict[str, list[dict[str, Any]]], policy: str
) -> None:
    """Issue 34 item 1: RBAC lets the agent write every node's NRT object; the chart's
    admission policy confines its writes to the object of the node its pod runs on."""
    account = f"nri-resmgr-{policy}"
    docs = installed[policy]
    (vap,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"
              and d["metadata"]["name"].endswith("-noderesourcetopologies")]  # fmt: skip
    (binding,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"
                  and d["metadata"]["name"].endswith("-noderesourcetopologies")]  # fmt: skip
    crd = nrt_crd_or_missing()
    with client(server) as admin:
        created = create(admin, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        assert created.status_code in (201, 409), created.text
        wait_established(admin, crd["metadata"]["name"])
        assert create(admin, VAP_PATH, vap).status_code == 201
        assert create(admin, VAP_BINDING_PATH, binding).status_code == 201
        for node in ("node-2", "node-1"):
            assert _eventually(lambda node=node: create(admin, NRTS, nrt(node)).status_code
                               in (201, 409))  # fmt: skip
    try:
        with agent_on(server, account, "node-1") as agent:

            def denied_create() -> httpx.Response:
                return agent.post(NRTS, json=nrt("node-3"), params={"dryRun": "All"})

            # The policy is enforced once the API server has compiled it: poll. (A policy's
            # denial is 422 Invalid; RBAC's is 403.)
            assert _eventually(lambda: denied_create().status_code == 422, timeout=30)
            assert (
                "may only write the NodeResourceTopology object of its own node, not "
                "node-3" in message(denied_create())
            )
            # The agent writes by server-side apply (a PATCH, admitted as an UPDATE here).
            theirs = nrt("node-2") | {"zones": [{"name": "forged", "type": "Node"}]}
            forged = apply_nrt(agent, theirs)
            assert forged.status_code == 422 and "not node-2" in message(forged), forged.text
            own = nrt("node-1") | {"zones": [{"name": "node-0", "type": "Node"}]}
            ok = apply_nrt(agent, own)
            assert ok.status_code == 200, ok.text
            # Nothing but create and patch in RBAC: no reads, no PUT, no delete.
            assert agent.get(f"{NRTS}/node-1").status_code == 403
            assert agent.put(f"{NRTS}/node-1", json=own).status_code == 403
            assert agent.delete(f"{NRTS}/node-1").status_code == 403
        with agent_on(server, account, None) as nodeless:
            refused = nodeless.post(NRTS, json=nrt("node-1"), params={"dryRun": "All"})
            assert refused.status_code == 422 and "name no node" in message(refused)
    finally:
        with client(server) as admin:
            for path in (f"{VAP_BINDING_PATH}/{binding['metadata']['name']}",
                         f"{VAP_PATH}/{vap['metadata']['name']}",
                         f"{NRTS}/node-1", f"{NRTS}/node-2"):  # fmt: skip
                admin.delete(path)
