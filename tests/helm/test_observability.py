"""The charts' observability and pod-hardening pieces, rendered by real helm: the metrics
port, probes and scrape annotations from httpEndpoint, NRT RBAC gated by
agent.nodeResourceTopology, a read-only root, RuntimeDefault seccomp and a memory limit."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helm.conftest import Helm
from tests.helm.crds import POLICIES, chart, documents

pytestmark = pytest.mark.integration

NRT_GROUP = "topology.node.k8s.io"


def pod_of(helm: Helm, policy: str, *args: str) -> dict[str, Any]:
    (ds,) = [d for d in documents(helm.template(chart(policy), *args)) if d["kind"] == "DaemonSet"]
    pod: dict[str, Any] = ds["spec"]["template"]
    return pod


def cluster_rules(helm: Helm, policy: str, *args: str) -> list[dict[str, Any]]:
    docs = documents(helm.template(chart(policy), *args))
    (role,) = [d for d in docs if d["kind"] == "ClusterRole"]
    rules: list[dict[str, Any]] = role["rules"]
    return rules


@pytest.mark.parametrize("policy", POLICIES)
def test_probes_port_and_annotations_follow_the_http_endpoint(helm: Helm, policy: str) -> None:
    pod = pod_of(helm, policy)
    (c,) = pod["spec"]["containers"]
    assert c["ports"] == [{"name": "http-metrics", "containerPort": 8891, "protocol": "TCP"}]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http-metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http-metrics"}
    assert pod["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "8891",
    }
    moved = pod_of(helm, policy, "--set", "config.instrumentation.httpEndpoint=:9100")
    assert moved["spec"]["containers"][0]["ports"][0]["containerPort"] == 9100
    assert moved["metadata"]["annotations"]["prometheus.io/port"] == "9100"


def test_no_endpoint_means_no_port_probes_or_scrape_annotations(helm: Helm) -> None:
    pod = pod_of(helm, "template", "--set", "config.instrumentation.httpEndpoint=")
    (c,) = pod["spec"]["containers"]
    assert not {"ports", "livenessProbe", "readinessProbe"} & set(c)
    assert "annotations" not in pod["metadata"]


def test_probes_and_annotations_can_be_switched_off(helm: Helm) -> None:
    pod = pod_of(helm, "balloons", "--set", "probes.enabled=false",
                 "--set", "prometheusAnnotations=false", "--set", "podAnnotations.a=b")  # fmt: skip
    (c,) = pod["spec"]["containers"]
    assert not {"livenessProbe", "readinessProbe"} & set(c)
    assert pod["metadata"]["annotations"] == {"a": "b"}


@pytest.mark.parametrize("policy", POLICIES)
def test_nrt_rbac_exactly_when_the_export_is_on(helm: Helm, policy: str) -> None:
    (rule,) = [r for r in cluster_rules(helm, policy) if r["apiGroups"] == [NRT_GROUP]]
    assert rule == {"apiGroups": [NRT_GROUP], "resources": ["noderesourcetopologies"],
                    "verbs": ["create", "patch"]}  # fmt: skip
    off = cluster_rules(helm, policy, "--set", "config.agent.nodeResourceTopology=false")
    assert [r for r in off if r["apiGroups"] == [NRT_GROUP]] == []


@pytest.mark.parametrize("policy", POLICIES)
def test_the_pod_is_hardened(helm: Helm, policy: str) -> None:
    pod = pod_of(helm, policy)
    (c,) = pod["spec"]["containers"]
    assert pod["spec"]["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert "limits" not in c["resources"]
    limited = pod_of(helm, policy, "--set", "resources.memoryLimit=1Gi")
    assert limited["spec"]["containers"][0]["resources"]["limits"] == {"memory": "1Gi"}


def test_the_values_schema_refuses_unknown_probe_keys(helm: Helm) -> None:
    result = helm.run("template", str(chart("template")), "--set", "probes.period=3", check=False)
    assert result.returncode != 0 and "period" in result.stderr


MONITORING = '{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}'


@pytest.mark.parametrize("policy", POLICIES)
def test_an_optional_network_policy_admits_only_the_named_peers_to_the_metrics_port(
    helm: Helm, policy: str
) -> None:
    assert not [d for d in documents(helm.template(chart(policy)))
                if d["kind"] == "NetworkPolicy"]  # fmt: skip
    on = ("--set", "networkPolicy.enabled=true", "--set-json", f"networkPolicy.from=[{MONITORING}]")
    (netpol,) = [d for d in documents(helm.template(chart(policy), *on))
                 if d["kind"] == "NetworkPolicy"]  # fmt: skip
    pod = pod_of(helm, policy, *on)
    selector = netpol["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= pod["metadata"]["labels"].items()
    assert netpol["spec"]["policyTypes"] == ["Ingress"]
    assert netpol["spec"]["ingress"] == [{
        "from": [{"namespaceSelector": {"matchLabels": {
            "kubernetes.io/metadata.name": "monitoring"}}}],
        "ports": [{"protocol": "TCP", "port": 8891}],
    }]  # fmt: skip
    # No peers named: nothing may connect; no endpoint: no policy (nothing listens).
    (closed,) = [d for d in documents(helm.template(chart(policy), *on[:2]))
                 if d["kind"] == "NetworkPolicy"]  # fmt: skip
    assert closed["spec"]["ingress"] == []
    silent = documents(helm.template(chart(policy), *on, "--set",
                                     "config.instrumentation.httpEndpoint="))  # fmt: skip
    assert not [d for d in silent if d["kind"] == "NetworkPolicy"]


@pytest.mark.parametrize("policy", POLICIES)
def test_a_startup_probe_holds_off_liveness_for_a_slow_start(helm: Helm, policy: str) -> None:
    (c,) = pod_of(helm, policy)["spec"]["containers"]
    startup = c["startupProbe"]
    assert startup["httpGet"] == {"path": "/healthz", "port": "http-metrics"}
    # Minutes for the first answer (an emulated node took over 30 s), where the liveness
    # probe alone would restart the daemon after 3 x 10 s.
    assert startup["periodSeconds"] * startup["failureThreshold"] == 300
    for probe in (startup, c["livenessProbe"], c["readinessProbe"]):
        assert probe["timeoutSeconds"] == 5
    assert (c["livenessProbe"]["periodSeconds"], c["livenessProbe"]["failureThreshold"]) == (10, 3)
    tuned = pod_of(helm, policy, "--set", "probes.startup.periodSeconds=2",
                   "--set", "probes.startup.failureThreshold=7",
                   "--set", "probes.timeoutSeconds=3")  # fmt: skip
    (t,) = tuned["spec"]["containers"]
    assert (t["startupProbe"]["periodSeconds"], t["startupProbe"]["failureThreshold"]) == (2, 7)
    assert {p["timeoutSeconds"] for p in (t["startupProbe"], t["livenessProbe"],
                                          t["readinessProbe"])} == {3}  # fmt: skip
    off = pod_of(helm, policy, "--set", "probes.enabled=false")["spec"]["containers"][0]
    assert "startupProbe" not in off


def test_the_values_schema_refuses_unknown_startup_probe_keys(helm: Helm) -> None:
    result = helm.run("template", str(chart("balloons")), "--set", "probes.startup.delay=3",
                      check=False)  # fmt: skip
    assert result.returncode != 0 and "delay" in result.stderr


@pytest.mark.parametrize("policy", POLICIES)
def test_host_network_is_a_value_off_by_default(helm: Helm, policy: str) -> None:
    spec = pod_of(helm, policy)["spec"]
    assert "hostNetwork" not in spec and "dnsPolicy" not in spec  # as nri-plugins' charts
    on = pod_of(helm, policy, "--set", "hostNetwork=true")["spec"]
    assert on["hostNetwork"] is True
    assert on["dnsPolicy"] == "ClusterFirstWithHostNet"  # cluster names still resolve
