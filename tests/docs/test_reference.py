"""The generated references agree with the code: docs/configuration.md with the models and
the not-applied declarations, docs/operations.md with the metrics registry and the policies'
gauges; every key has a meaning, and every key declared not applied is said at load."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from nri_resmgr import log as logconfig
from nri_resmgr.config import structure_spec
from nri_resmgr.config.models import SPEC_KINDS
from nri_resmgr.config.notapplied import _reported
from nri_resmgr.observability.setup import NOT_APPLIED, declare_not_applied
from nri_resmgr.policies.balloons import BalloonsPolicy
from nri_resmgr.policies.template import TemplatePolicy
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from nri_resmgr.policies.topology_aware.keys import NOT_APPLIED_ANNOTATIONS
from nri_resmgr.resmgr.policy import PolicyEnv
from nri_resmgr.sim.synthetic import N4C16, write_sysfs
from tests.policies.topology_aware_e2e import keys_table
from tools import docref


@pytest.fixture(autouse=True)
def _fresh() -> None:
    _reported.clear()


def _said(caplog: pytest.LogCaptureFixture) -> set[str]:
    tail = ": accepted, not applied by nri-resmgr "
    return {r.getMessage().split(tail)[0] for r in caplog.records if tail in r.getMessage()}


@pytest.mark.parametrize("name", sorted(docref.GENERATED))
def test_generated_block_matches_the_code(name: str) -> None:
    page, render = docref.GENERATED[name]
    assert docref.block(page.read_text(), name) == render(), (
        f"{page.name}: {name} is stale; run python -m tools.docref --write"
    )


def _all_paths() -> set[str]:
    return {k.path for cls in SPEC_KINDS.values() for k in docref.keys(cls)}


def test_every_key_of_every_model_has_a_meaning() -> None:
    table = docref.meanings()["keys"]
    missing = sorted(p for p in _all_paths() if docref._entry(table, p) is None)
    assert missing == []


def test_no_meaning_names_a_key_the_models_lack() -> None:
    paths = _all_paths()
    stale = sorted(
        e for e in docref.meanings()["keys"] if not any(docref.covers(e, p) for p in paths)
    )
    assert stale == []


def test_every_key_declared_not_applied_says_why_on_the_page() -> None:
    table = docref.meanings()["keys"]
    unexplained = sorted(
        p for kind in SPEC_KINDS for p in _all_paths()
        if not docref.status(kind, p) and not (docref._entry(table, p) or {}).get("why")
    )  # fmt: skip
    assert unexplained == []


def test_every_declared_path_is_a_key_of_the_models() -> None:
    paths = _all_paths()
    for kind in SPEC_KINDS:
        for d in docref.declared_not_applied(kind):
            assert any(docref.covers(d, p) for p in paths), f"{kind}: {d} names no key"


def test_annotations_are_the_ones_topology_aware_is_probed_with() -> None:
    listed = {
        k for k, v in docref.meanings()["annotations"].items() if "topology-aware" in v["policies"]
    }
    assert listed == {keys_table._key(a) for a in keys_table.ANNOTATIONS}
    why = docref.meanings()["annotations"]
    assert all(why[a].get("why") for a in NOT_APPLIED_ANNOTATIONS)


# A value other than the default for each common key declared not applied.
COMMON_PROBES: dict[str, Any] = {
    "spec.instrumentation.samplingRatePerMillion": 5,
    "spec.instrumentation.tracingCollector": "otlp-http",
    "spec.instrumentation.metricsExporter": "otlp-grpc",
    "spec.instrumentation.reportPeriod": "10s",
    "spec.instrumentation.logExporter": "otlp-http",
    "spec.instrumentation.logExportPeriod": "5s",
    "spec.instrumentation.metrics.polled": ["policy"],
    "spec.agent.podResourceAPI": True,
    "spec.log.klog.v": 3,
    "spec.control.rdt": {"enable": True},
    "spec.control.blockio": {"classes": {"slow": [{"weight": 100}]}},
}


def _nest(path: str, value: Any) -> dict[str, Any]:
    out: Any = value
    for part in reversed(path.split(".")[1:]):
        out = {part: out}
    assert isinstance(out, dict)
    return out


def test_every_common_key_declared_not_applied_is_probed() -> None:
    assert set(COMMON_PROBES) == set(NOT_APPLIED)


@pytest.mark.parametrize("path", sorted(COMMON_PROBES))
def test_a_common_key_declared_not_applied_is_said_at_load(
    path: str, caplog: pytest.LogCaptureFixture
) -> None:
    data = {"reservedResources": {"cpu": "1"}} | _nest(path, COMMON_PROBES[path])
    spec = structure_spec(data, "TemplatePolicy")
    with caplog.at_level(logging.WARNING):
        declare_not_applied(spec)
        logconfig.configure(spec.log)
    assert path in _said(caplog)


@pytest.mark.parametrize(
    ("kind", "policy", "data", "path"),
    [
        ("TemplatePolicy", TemplatePolicy, {}, "spec.reservedResources.cpu"),
        ("TemplatePolicy", TemplatePolicy, {"availableResources": {"cpu": "cpuset:0-3"}},
         "spec.availableResources.cpu"),
        ("TopologyAwarePolicy", TopologyAwarePolicy,
         {"control": {"cpu": {"classes": {"fast": {"minFreq": 2000000}}}}},
         "spec.control.cpu.classes"),
        ("BalloonsPolicy", BalloonsPolicy, {"reservedResources": {"cpu": "1", "memory": "1G"}},
         "spec.reservedResources.memory"),
        ("BalloonsPolicy", BalloonsPolicy,
         {"control": {"cpu": {"classes": {"c": {"energyPerformancePreference": 1}}}}},
         "spec.control.cpu.classes.<name>.energyPerformancePreference"),
    ],
)  # fmt: skip
def test_a_policy_key_declared_not_applied_is_said_at_load(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, kind: str, policy: Any,
    data: dict[str, Any], path: str,
) -> None:  # fmt: skip
    write_sysfs(tmp_path, N4C16)
    spec = structure_spec({"reservedResources": {"cpu": "1"}} | data, kind)
    assert not docref.status(kind, path)
    with caplog.at_level(logging.WARNING):
        policy().setup(spec, PolicyEnv(host_root=str(tmp_path)))
    assert path in _said(caplog)


def test_a_why_is_given_only_for_keys_some_policy_does_not_apply() -> None:
    table = docref.meanings()["keys"]
    paths = _all_paths()
    stale = sorted(
        entry for entry, v in table.items() if v.get("why")
        and not any(docref.covers(entry, p) and not docref.status(k, p)
                    for p in paths for k in SPEC_KINDS)
    )  # fmt: skip
    assert stale == []
