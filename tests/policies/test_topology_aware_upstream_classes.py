"""Upstream's topology-aware class keys (scheduling classes, CPU classes and the pools' CPU
classes, controllable interrupts) load from an nri-plugins CR, are checked as upstream checks
them, and are said once each at load as accepted but not applied."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from nri_resmgr.config.documents import load_document
from nri_resmgr.config.models import TopologyAwareSpec
from nri_resmgr.config.notapplied import _reported
from nri_resmgr.errors import ConfigError
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from nri_resmgr.resmgr.policy import PolicyEnv
from nri_resmgr.sim.synthetic import N4C16, write_sysfs

UPSTREAM_KEYS: dict[str, Any] = {
    "schedulingClasses": [
        {"name": "rt", "policy": "fifo", "priority": 10, "ioClass": "rt", "ioPriority": 0},
        {"name": "low", "policy": "batch", "nice": 10, "flags": ["reset-on-fork"]},
    ],
    "namespaceSchedulingClasses": {"batch": "low"},
    "podQoSSchedulingClasses": {"Guaranteed": "rt"},
    "cpuClasses": [
        {"name": "fast", "minFreq": "turbo", "maxFreq": "turbo"},
        {"name": "slow", "maxFreq": "base", "disabledCstates": ["C6"]},
    ],
    "sharedPoolCPUClass": "slow",
    "reservedPoolCPUClass": "slow",
    "defaultExclusiveCPUClass": "fast",
    "controllableInterrupts": ["eth*", "nvme*"],
}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    _reported.clear()


def _load(**spec: Any) -> TopologyAwareSpec:
    doc = {
        "apiVersion": "config.nri/v1alpha1",
        "kind": "TopologyAwarePolicy",
        "spec": {"reservedResources": {"cpu": "750m"}, **spec},
    }
    loaded = load_document(doc).spec
    assert isinstance(loaded, TopologyAwareSpec)
    return loaded


def _refusal(**spec: Any) -> list[str]:
    with pytest.raises(ConfigError) as info:
        _load(**spec)
    return list(info.value.errors)


def test_upstream_class_keys_load_in_upstreams_shapes() -> None:
    spec = _load(**UPSTREAM_KEYS)
    assert [(c.name, c.policy, c.priority) for c in spec.scheduling_classes] == [
        ("rt", "fifo", 10),
        ("low", "batch", None),
    ]
    assert spec.scheduling_classes[1].flags == ("reset-on-fork",)
    assert spec.namespace_scheduling_classes == {"batch": "low"}
    assert spec.pod_qos_scheduling_classes == {"Guaranteed": "rt"}
    assert [c.name for c in spec.cpu_classes] == ["fast", "slow"]
    assert spec.cpu_classes[1].disabled_cstates == ("C6",)
    assert (
        spec.shared_pool_cpu_class,
        spec.reserved_pool_cpu_class,
        spec.default_exclusive_cpu_class,
    ) == ("slow", "slow", "fast")
    assert spec.controllable_interrupts == ("eth*", "nvme*")


def test_each_upstream_class_key_is_said_not_applied_once_at_load(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_sysfs(tmp_path, N4C16)
    spec = _load(**UPSTREAM_KEYS)
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            TopologyAwarePolicy().setup(spec, PolicyEnv(host_root=str(tmp_path)))
    said = [
        r.getMessage().split(":")[0]
        for r in caplog.records
        if "accepted, not applied" in r.getMessage()
    ]
    assert sorted(said) == sorted(f"spec.{k}" for k in UPSTREAM_KEYS)


def test_unset_upstream_class_keys_are_not_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_sysfs(tmp_path, N4C16)
    with caplog.at_level(logging.WARNING):
        TopologyAwarePolicy().setup(_load(), PolicyEnv(host_root=str(tmp_path)))
    assert not [r for r in caplog.records if "accepted, not applied" in r.getMessage()]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"podQoSSchedulingClasses": {"Gold": "rt"}},
         "spec.podQoSSchedulingClasses.Gold: not a pod QoS class"),
        ({"podQoSSchedulingClasses": {"burstable": "nope"}},
         "spec.podQoSSchedulingClasses.burstable: unknown scheduling class 'nope'"),
        ({"namespaceSchedulingClasses": {"ns": "nope"}},
         "spec.namespaceSchedulingClasses.ns: unknown scheduling class 'nope'"),
        ({"cpuClasses": [{"name": "a"}]},
         "spec.sharedPoolCPUClass: required when cpuClasses are defined"),
        ({"cpuClasses": [{"name": "a"}], "sharedPoolCPUClass": "a",
          "defaultExclusiveCPUClass": "b"},
         "spec.defaultExclusiveCPUClass: unknown CPU class 'b'"),
        ({"schedulingClasses": [{"name": "x", "policy": "bogus"}]}, "schedulingClasses"),
    ],
)  # fmt: skip
def test_class_references_upstream_refuses_are_refused_and_named(
    spec: dict[str, Any], expected: str
) -> None:
    errors = _refusal(**{"schedulingClasses": [{"name": "rt"}], **spec})
    assert any(expected in e for e in errors), errors


def test_pool_classes_without_cpu_classes_load_as_upstream() -> None:
    # Upstream checks the pools' class names only against a defined cpuClasses list.
    assert _load(sharedPoolCPUClass="any").shared_pool_cpu_class == "any"
