"""The three charts under real helm: lint, render, DRA gating, byte-identity without DRA.

"Byte-identical" here means: the whole ``helm template`` output with DRA disabled equals,
byte for byte, the output with DRA unset and the output of the same chart with every DRA
block cut out of its templates, except for exactly the two lines ``  dra:`` /
``    enabled: false`` in the spec of the config CR, which carry the user's explicit false
to the daemon (it tells unset from false).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nri_resmgr.cli import parse_options
from nri_resmgr.config.documents import load_document
from nri_resmgr.config.draswitch import dra_switch
from tests.helm.conftest import DRA_STATES, NAMESPACE, Helm
from tests.helm.crds import POLICIES, admit, chart, committed_crd, documents

pytestmark = pytest.mark.integration

DRA_FALSE_LINES = "  dra:\n    enabled: false\n"
# A DRA block with the whitespace its ``{{-`` trims, as if it had never been written.
DRA_BLOCK = re.compile(
    r"\s*\{\{- if include \"nri-resmgr\.draEnabled\" \. \}\}.*?\{\{- end \}\}", re.DOTALL
)
SLICE_RULE = {
    "apiGroups": ["resource.k8s.io"],
    "resources": ["resourceslices"],
    "verbs": ["list", "watch", "create", "update", "delete"],
}
CLAIM_RULE = {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get"]}
NODE_GET_RULE = {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}


def dra_mounts(policy: str) -> dict[str, str]:
    """The host paths DRA mounts, at the same paths: of the kubelet plugins directory only
    the driver's own (the others hold other drivers' sockets, issue 34 item 7)."""
    return {
        "kubelet-plugin": f"/var/lib/kubelet/plugins/{policy}.nri.io",
        "kubelet-plugins-registry": "/var/lib/kubelet/plugins_registry",
        "cdi-specs": "/var/run/cdi",
        "dra-state": "/run/nri-resmgr",
    }


DRA_ARGS = [
    "--kubelet-plugins-dir",
    "/var/lib/kubelet/plugins",
    "--kubelet-registry-dir",
    "/var/lib/kubelet/plugins_registry",
    "--cdi-dir",
    "/var/run/cdi",
    "--dra-state-dir",
    "/run/nri-resmgr",
]

NRT_RULE = {
    "apiGroups": ["topology.node.k8s.io"],
    "resources": ["noderesourcetopologies"],
    "verbs": ["create", "patch"],
}

Render = Callable[[str, str], str]


@pytest.fixture(scope="module")
def render(helm: Helm) -> Render:
    cache: dict[tuple[str, str], str] = {}

    def rendered(policy: str, state: str) -> str:
        if (policy, state) not in cache:
            cache[(policy, state)] = helm.template(chart(policy), *DRA_STATES[state])
        return cache[(policy, state)]

    return rendered


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind]
    return found


def container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (c,) = one(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    found: dict[str, Any] = c
    return found


def volumes(docs: list[dict[str, Any]]) -> dict[str, str]:
    pod = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    return {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}


def mounts(docs: list[dict[str, Any]]) -> dict[str, str]:
    return {m["name"]: m["mountPath"] for m in container(docs)["volumeMounts"]}


# -- lint ---------------------------------------------------------------------------------


@pytest.mark.parametrize("state", sorted(DRA_STATES))
@pytest.mark.parametrize("policy", POLICIES)
def test_helm_lint_strict(helm: Helm, policy: str, state: str) -> None:
    result = helm.lint(chart(policy), DRA_STATES[state])
    assert "0 chart(s) failed" in result.stdout, result.stdout


# -- DRA gating -----------------------------------------------------------------------------


@pytest.mark.parametrize("state", sorted(DRA_STATES))
@pytest.mark.parametrize("policy", POLICIES)
def test_dra_rbac_and_mounts_exactly_when_enabled(render: Render, policy: str, state: str) -> None:
    docs = documents(render(policy, state))
    enabled = state == "enabled"
    rules = one(docs, "ClusterRole")["rules"]
    assert (SLICE_RULE in rules) is enabled
    assert (CLAIM_RULE in rules) is enabled
    dra_rules = (SLICE_RULE, CLAIM_RULE)
    assert not any("resource.k8s.io" in r["apiGroups"] for r in rules if r not in dra_rules)
    classes = [d for d in docs if d["kind"] == "DeviceClass"]
    driver = f"{policy}.nri.io"
    assert classes == (
        [
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": classes[0]["metadata"] | {"name": driver},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
            }
        ]
        if enabled
        else []
    )
    for name, path in dra_mounts(policy).items():
        assert (volumes(docs).get(name) == path) is enabled
        assert (mounts(docs).get(name) == path) is enabled
    assert "/var/lib/kubelet/plugins" not in volumes(docs).values()
    args = container(docs)["args"]
    assert all((a in args) is enabled for a in DRA_ARGS)
    spec = _config_cr(docs)["spec"]
    assert spec.get("dra") == ({"enabled": enabled} if state != "unset" else None)


def _config_cr(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (cr,) = [d for d in docs if d["apiVersion"] == "config.nri/v1alpha1"]
    return cr


@pytest.mark.parametrize("policy", POLICIES)
def test_disabled_and_unset_render_byte_identical(render: Render, policy: str) -> None:
    disabled, unset = render(policy, "disabled"), render(policy, "unset")
    assert disabled.count(DRA_FALSE_LINES) == 1
    config_doc = next(d for d in disabled.split("---\n") if "kind: " in d and "config.nri/" in d)
    assert DRA_FALSE_LINES in config_doc
    assert disabled.replace(DRA_FALSE_LINES, "") == unset


@pytest.mark.parametrize("policy", POLICIES)
def test_unset_equals_a_chart_without_any_dra(
    helm: Helm, render: Render, policy: str, tmp_path: Path
) -> None:
    stripped = tmp_path / chart(policy).name
    shutil.copytree(chart(policy), stripped)
    cut = 0
    for template in (stripped / "templates").iterdir():
        text = template.read_text()
        cut += len(DRA_BLOCK.findall(text))
        template.write_text(DRA_BLOCK.sub("", text))
    assert cut == 6, (
        "expected the RBAC block, the args, the mounts, the volumes, the slice policy, "
        "the DeviceClass"
    )
    assert helm.template(stripped) == render(policy, "unset")
    # With the gates gone, even asking for DRA adds nothing but the CR's value.
    asked = helm.template(stripped, *DRA_STATES["enabled"])
    assert asked.replace("  dra:\n    enabled: true\n", "") == render(policy, "unset")


@pytest.mark.parametrize("policy", POLICIES)
def test_enabled_adds_only_the_dra_pieces(render: Render, policy: str) -> None:
    enabled, unset = documents(render(policy, "enabled")), documents(render(policy, "unset"))
    one(enabled, "ClusterRole")["rules"].remove(SLICE_RULE)
    one(enabled, "ClusterRole")["rules"].remove(CLAIM_RULE)
    one(enabled, "ClusterRole")["rules"].remove(NODE_GET_RULE)
    pod = one(enabled, "DaemonSet")["spec"]["template"]["spec"]
    pod["volumes"] = [v for v in pod["volumes"] if v["name"] not in dra_mounts(policy)]
    c = pod["containers"][0]
    c["volumeMounts"] = [m for m in c["volumeMounts"] if m["name"] not in dra_mounts(policy)]
    c["args"] = [a for a in c["args"] if a not in DRA_ARGS]
    del _config_cr(enabled)["spec"]["dra"]
    slice_policy = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "DeviceClass"}

    def dra_only(d: dict[str, Any]) -> bool:
        return d["kind"] == "DeviceClass" or (
            d["kind"] in slice_policy and d["metadata"]["name"].endswith("-resourceslices")
        )

    assert sorted(d["kind"] for d in enabled if dra_only(d)) == sorted(slice_policy)
    enabled = [d for d in enabled if not dra_only(d)]
    assert enabled == unset


# -- what every render must hold ----------------------------------------------------------


@pytest.mark.parametrize("state", sorted(DRA_STATES))
@pytest.mark.parametrize("policy", POLICIES)
def test_daemonset_runs_the_daemon_as_the_cli_expects(
    render: Render, policy: str, state: str
) -> None:
    docs = documents(render(policy, state))
    c = container(docs)
    options = parse_options(c["args"], env={"NODE_NAME": "node-1"})
    assert options.policy == policy
    assert options.host_root == "/host"
    assert options.config_namespace == NAMESPACE
    assert options.nri_plugin_index == "90"
    assert options.has_cluster_access
    pod = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] > options.shutdown_grace
    assert pod["serviceAccountName"] == one(docs, "ServiceAccount")["metadata"]["name"]
    (env,) = [e for e in c["env"] if e["name"] == "NODE_NAME"]
    assert env["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert c["securityContext"]["allowPrivilegeEscalation"] is False


@pytest.mark.parametrize("policy", POLICIES)
def test_host_mounts_as_nri_plugins(render: Render, policy: str) -> None:
    docs = documents(render(policy, "unset"))
    # Only what the code reads (issue 19.14): no state dir, no pod-resources, meminfo alone.
    expected = {
        "hostsysfs": ("/sys", "/host/sys"),
        "nri-sockets": ("/var/run/nri", "/var/run/nri"),
    }
    if policy != "template":
        expected["hostmeminfo"] = ("/proc/meminfo", "/host/proc/meminfo")
    assert {n: (volumes(docs)[n], mounts(docs)[n]) for n in volumes(docs)} == expected


CLASSES = {
    "freq": '{"cpu": {"classes": {"slow": {"maxFreq": 2000000}, "busy": {"minFreq": 1}}}}',
    "uncore": '{"cpu": {"classes": {"slow": {"uncoreMaxFreq": 1800000}}}}',
    "both": '{"cpu": {"classes": {"slow": {"freqGovernor": "powersave", "uncoreMinFreq": 1}}}}',
}


@pytest.mark.parametrize("classes", sorted(CLASSES))
@pytest.mark.parametrize("policy", POLICIES)
def test_cpu_classes_get_writable_cpufreq_and_uncore_mounts_and_nothing_more(
    helm: Helm, policy: str, classes: str
) -> None:
    """/host/sys is read-only: balloons' CPU classes could never be applied (issue 34 item
    7). With classes in the values, the parts of /sys they write are mounted writable."""
    docs = documents(helm.template(chart(policy), "--set-json",
                                   f"config.control={CLASSES[classes]}"))  # fmt: skip
    pod = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    writable = {m["mountPath"]: volumes(docs)[m["name"]] for m in pod["containers"][0]
                ["volumeMounts"] if not m.get("readOnly")}  # fmt: skip
    cpu = "/sys/devices/system/cpu"
    expected = {}
    if policy == "balloons" and classes in ("freq", "both"):
        expected[f"/host{cpu}/cpufreq"] = f"{cpu}/cpufreq"
    if policy == "balloons" and classes in ("uncore", "both"):
        expected[f"/host{cpu}/intel_uncore_frequency"] = f"{cpu}/intel_uncore_frequency"
    assert writable == expected
    for volume in pod["volumes"]:
        if volume["name"].startswith("host-"):
            assert volume["hostPath"]["type"] == "Directory"  # no node without cpufreq starts


@pytest.mark.parametrize("policy", POLICIES)
def test_rbac_is_least_privilege(render: Render, policy: str) -> None:
    docs = documents(render(policy, "unset"))
    plural = committed_crd(policy)["spec"]["names"]["plural"]
    # Only verbs the code uses (issue 34 item 8): watches by name are a list and a watch, the
    # status a merge patch; nodes/get is the DRA publisher's (test_enabled_adds_only_...).
    assert one(docs, "Role")["rules"] == [
        {"apiGroups": ["config.nri"], "resources": [plural], "verbs": ["list", "watch"]},
        {"apiGroups": ["config.nri"], "resources": [f"{plural}/status"], "verbs": ["patch"]},
        # A result that does not fit into a CR's bounded status is an Event on it.
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    ]
    assert one(docs, "ClusterRole")["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},
        NRT_RULE,
    ]
    account = one(docs, "ServiceAccount")["metadata"]
    for binding in ("RoleBinding", "ClusterRoleBinding"):
        (subject,) = one(docs, binding)["subjects"]
        assert (subject["name"], subject["namespace"]) == (account["name"], NAMESPACE)


@pytest.mark.parametrize("state", sorted(DRA_STATES))
@pytest.mark.parametrize("policy", POLICIES)
def test_default_config_cr_is_valid_for_crd_and_daemon(
    render: Render, policy: str, state: str
) -> None:
    cr = _config_cr(documents(render(policy, state)))
    assert (cr["metadata"]["name"], cr["metadata"]["namespace"]) == ("default", NAMESPACE)
    assert admit(cr) == []
    document = load_document(cr)
    assert document.policy_name == policy
    assert document.spec.dra.enabled == {"enabled": True, "disabled": False}.get(state)


@pytest.mark.parametrize("policy", POLICIES)
def test_include_crds_ships_the_committed_crd(helm: Helm, policy: str) -> None:
    docs = documents(helm.template(chart(policy), "--include-crds"))
    assert one(docs, "CustomResourceDefinition") == committed_crd(policy)


@pytest.mark.parametrize(
    ("value", "complaint"),
    [
        ("config.dra.enabeld=true", "enabeld"),
        ("config.dra.enabled=yes", "enabled"),
        ("config.reservedResources.cpu=lots", "cpu"),
        ("nri.plugin.index=100", "index"),
    ],
)
def test_values_schema_rejects_bad_values(helm: Helm, value: str, complaint: str) -> None:
    result = helm.run("template", str(chart("template")), "--set", value, check=False)
    assert result.returncode != 0
    assert complaint in result.stderr


# -- DRA turned on by the configuration (dra.enabled unset) -------------------------------

ASKING = {
    "topology-aware": (
        "--set", "config.dra.cpuDeviceMode=grouped", "--set", "config.dra.groupedCPUs=8-15",
    ),
    "balloons": (
        "--set", "config.balloonTypes[0].name=claimed",
        "--set", "config.balloonTypes[0].dra.publish=true",
    ),
}  # fmt: skip


@pytest.mark.parametrize("policy", sorted(ASKING))
def test_a_config_asking_for_devices_gets_the_dra_pieces_unless_disabled(
    helm: Helm, policy: str
) -> None:
    """The chart follows the daemon's rule (config.draswitch): with dra.enabled unset, a
    key asking for devices turns DRA on, so the RBAC, mounts and DeviceClass come with it,
    exactly as with dra.enabled true; an explicit false keeps them out."""

    def rendered(*state: str) -> list[dict[str, Any]]:
        return documents(helm.template(chart(policy), *ASKING[policy], *state))

    asked, enabled = rendered(), rendered(*DRA_STATES["enabled"])
    assert one(asked, "DeviceClass") and SLICE_RULE in one(asked, "ClusterRole")["rules"]
    cr = _config_cr(asked)
    assert "enabled" not in cr["spec"].get("dra", {})
    assert dra_switch(load_document(cr).spec).on
    del _config_cr(enabled)["spec"]["dra"]["enabled"]
    if not _config_cr(enabled)["spec"]["dra"]:
        del _config_cr(enabled)["spec"]["dra"]
    assert asked == enabled

    disabled = rendered(*DRA_STATES["disabled"])
    assert not [d for d in disabled if d["kind"] == "DeviceClass"]
    assert SLICE_RULE not in one(disabled, "ClusterRole")["rules"]
    assert not any(a in container(disabled)["args"] for a in DRA_ARGS)
    assert not dra_switch(load_document(_config_cr(disabled)).spec).on
