"""The chart's API priority-and-fairness objects (docs/fleet.md): the agent's ServiceAccount
in a priority level of its own, matched before kube-system-service-accounts. That the API
server takes them and classifies the agents' requests by them is proven by the fleet
harness (tests/fleet/test_fleet_smoke.py), which applies the rendered chart."""

from __future__ import annotations

import pytest

from tests.helm.conftest import NAMESPACE, Helm
from tests.helm.crds import POLICIES, chart, documents

KUBE_SYSTEM_SERVICE_ACCOUNTS_PRECEDENCE = 900
"""The built-in FlowSchema a ServiceAccount of kube-system falls into otherwise."""


@pytest.mark.parametrize("policy", POLICIES)
def test_the_agent_has_a_priority_level_of_its_own(helm: Helm, policy: str) -> None:
    docs = documents(helm.template(chart(policy)))
    (schema,) = [d for d in docs if d["kind"] == "FlowSchema"]
    (level,) = [d for d in docs if d["kind"] == "PriorityLevelConfiguration"]
    name = f"nri-resmgr-{policy}"
    assert schema["apiVersion"] == level["apiVersion"] == "flowcontrol.apiserver.k8s.io/v1"
    assert schema["metadata"]["name"] == level["metadata"]["name"] == name
    spec = schema["spec"]
    assert spec["priorityLevelConfiguration"] == {"name": name}
    assert spec["matchingPrecedence"] < KUBE_SYSTEM_SERVICE_ACCOUNTS_PRECEDENCE
    (rule,) = spec["rules"]
    account = {"name": name, "namespace": NAMESPACE}
    assert rule["subjects"] == [{"kind": "ServiceAccount", "serviceAccount": account}]
    assert rule["resourceRules"][0]["verbs"] == ["*"]
    limited = level["spec"]["limited"]
    assert level["spec"]["type"] == "Limited"
    assert limited["nominalConcurrencyShares"] == 20
    assert limited["limitResponse"]["type"] == "Queue"
    assert limited["limitResponse"]["queuing"]["queueLengthLimit"] == 250


def test_the_shares_and_queue_length_are_values(helm: Helm) -> None:
    docs = documents(helm.template(chart("balloons"), "--set",
                                   "priorityAndFairness.nominalConcurrencyShares=50", "--set",
                                   "priorityAndFairness.queueLengthLimit=64"))  # fmt: skip
    (level,) = [d for d in docs if d["kind"] == "PriorityLevelConfiguration"]
    assert level["spec"]["limited"]["nominalConcurrencyShares"] == 50
    assert level["spec"]["limited"]["limitResponse"]["queuing"]["queueLengthLimit"] == 64


def test_switched_off_nothing_of_it_is_rendered(helm: Helm) -> None:
    docs = documents(helm.template(chart("template"), "--set", "priorityAndFairness.enabled=false"))
    assert not [d for d in docs if d["apiVersion"].startswith("flowcontrol.apiserver.k8s.io")]


def test_the_nrt_interval_reaches_the_daemon_only_when_set(helm: Helm) -> None:
    def args(*extra: str) -> list[str]:
        docs = documents(helm.template(chart("topology-aware"), *extra))
        (daemonset,) = [d for d in docs if d["kind"] == "DaemonSet"]
        return list(daemonset["spec"]["template"]["spec"]["containers"][0]["args"])

    assert "--nrt-interval" not in args()
    given = args("--set", "nrtIntervalSeconds=10")
    assert given[given.index("--nrt-interval") + 1] == "10"
