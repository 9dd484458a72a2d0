"""``require-isolated-cpus`` and ``prefer-cpu-priority`` on topology-aware (nri-plugins
``pod-preferences.go`` isolatedCPUsPreference / strictIsolatedCPUsPreference /
cpuPrioPreference, ``resources.go`` verifyStrictCPUPreferences), after n4c16's
test18-strict-alignment where sysfs can express it."""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_resmgr.cpus.errors import PlacementError
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from nri_resmgr.resmgr.policy import PolicyEnv
from nri_resmgr.sim.synthetic import N4C16, N4C16_ISOLATED, Layout, write_sysfs
from nri_resmgr.sim.synthetic_cpu import write_cpufreq
from tests.policies.workload import Runtime, guaranteed, topology_spec

D = "resource-policy.nri.io"


def _runtime(root: Path, layout: Layout, freqs: dict[str, int] | None = None) -> Runtime:
    write_sysfs(root, layout)
    if freqs:
        write_cpufreq(root, freqs)
    policy = TopologyAwarePolicy()
    policy.setup(topology_spec(), PolicyEnv(host_root=str(root)))
    return Runtime(policy)


@pytest.mark.parametrize(
    ("annotations", "fails"),
    [
        ({f"require-isolated-cpus.{D}/container.c0": "true"}, True),  # test18 pod4
        (  # pod6: the container-scoped require beats the pod-scoped prefer=false
            {
                f"prefer-isolated-cpus.{D}/pod": "false",
                f"require-isolated-cpus.{D}/container.c0": "true",
            },
            True,
        ),
        (  # pod7: the container-scoped prefer beats the pod-scoped require: a preference
            {
                f"prefer-isolated-cpus.{D}/container.c0": "true",
                f"require-isolated-cpus.{D}/pod": "true",
            },
            False,
        ),
        ({f"prefer-isolated-cpus.{D}/container.c0": "true"}, False),  # pod5
    ],
)
def test_required_isolated_cpus_fail_creation_where_there_are_none(
    tmp_path: Path, annotations: dict[str, str], fails: bool
) -> None:
    rt = _runtime(tmp_path, N4C16)
    pod = guaranteed("pod", 1000, annotations=annotations)
    if fails:
        with pytest.raises(PlacementError, match="isolated CPUs"):
            rt.create(pod)
    else:
        assert rt.cpus[rt.create(pod).id]


def test_required_isolated_cpus_are_granted_where_sysfs_has_them(tmp_path: Path) -> None:
    rt = _runtime(tmp_path, N4C16_ISOLATED)
    two = guaranteed("pod", 2000, annotations={f"require-isolated-cpus.{D}/pod": "true"})
    assert rt.cpus[rt.create(two).id] == "14-15"
    # The isolated CPUs are gone now: the next strict request fails rather than running
    # on ordinary exclusive CPUs.
    with pytest.raises(PlacementError, match="require-isolated-cpus"):
        rt.create(guaranteed("more", 1000, annotations={f"require-isolated-cpus.{D}": "true"}))


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, "0"), ("high", "0"), ("low", "2"), ("none", "0"), ("bogus", "0")],
)
def test_prefer_cpu_priority_picks_exclusive_cpus_by_base_frequency(
    tmp_path: Path, value: str | None, expected: str
) -> None:
    # In every NUMA node the first core runs at 3 GHz base and the second at 2 GHz, so
    # priority decides which core of the chosen node an exclusive CPU comes from.
    fast, slow = "0-1,4-5,8-9,12-13", "2-3,6-7,10-11,14-15"
    rt = _runtime(tmp_path, N4C16, {fast: 3000000, slow: 2000000})
    reserved = rt.policy.engine.reserved  # type: ignore[attr-defined]
    annotations = {} if value is None else {f"prefer-cpu-priority.{D}/pod": value}
    cpus = CpuSet.parse(rt.cpus[rt.create(guaranteed("g", 1000, annotations=annotations)).id] or "")
    node = next(n for n in range(4) if cpus.issubset(CpuSet(range(4 * n, 4 * n + 4))))
    assert str(CpuSet(c - 4 * node for c in cpus)) == expected, (cpus, reserved)
