"""Synchronize and reconfigure restore native containers around the DRA claims' CPUs and
the grouped CPUs set apart (issue 33 item 1), never onto them.

The failure this pins (found by ``test_grouped_state_machine.py``, shrunk): a restore once
started from no grants at all and put the claims back only afterwards. A Burstable container
whose cpuset then matched no pool (its NUMA node's shared CPUs, grouped ones not set apart)
was re-placed in NUMA node #1, whose only free CPUs were grouped; once the grouped CPUs were
set apart again that pool had no shared CPU left, and the container kept running on grouped
CPUs 5-7 ("no CPU left in NUMA node #1; it keeps cpuset 5-7"), which a later claim in that
group could no longer be given. The same order let a restore grant a Guaranteed container
grouped CPU 14; moved off it afterwards with no shared CPU left, Synchronize raised
PlacementError. Both shrunk failures are replayed in ``test_grouped_state_machine.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from nri_resmgr.config.models import DraConfig, PolicySpec
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.policies.topology_aware import TopologyAwarePolicy
from nri_resmgr.resmgr.model import ClaimGrant, Container
from nri_resmgr.resmgr.policy import PolicyEnv
from tests.policies.workload import Runtime, burstable, guaranteed, topology_spec
from tests.sysfs.fakesys import N4C16, write_sysfs

SET_APART = CpuSet.parse("5-7,12-14")  # N4C16: NUMA node #1 is 4-7, #3 is 12-15; CPU 0 reserved


Started = tuple[TopologyAwarePolicy, Runtime, PolicySpec]


def start(tmp_path: Path, spec: PolicySpec) -> Started:
    write_sysfs(tmp_path, N4C16)
    policy = TopologyAwarePolicy()
    policy.setup(spec, PolicyEnv(host_root=str(tmp_path)))
    return policy, Runtime(policy), spec


def grouped(tmp_path: Path) -> Started:
    dra = DraConfig(enabled=True, cpu_device_mode="grouped", grouped_cpus=str(SET_APART))
    return start(tmp_path, topology_spec(dra=dra))


def per_cpu_claims(tmp_path: Path) -> Started:
    """Per-CPU mode with the same CPUs held by two prepared claims instead."""
    policy, runtime, spec = start(tmp_path, topology_spec(dra=DraConfig(enabled=True)))
    for n, cpus in enumerate(("5-7", "12-14")):
        uid = f"00000000-0000-4000-8000-{n:012d}"
        grant = ClaimGrant(uid, "default", CpuSet.parse(cpus), f"{n:032d}", f"x/cpu={uid}")
        runtime.apply(policy.claim_cpus(grant))
    return policy, runtime, spec


def natives(runtime: Runtime) -> list[Container]:
    """The shrunk failure's natives: CPU 4, NUMA node #1's only CPU outside SET_APART, ends
    up held exclusively (by the 2-CPU one, 3-4), and both Burstables share CPU 15."""
    pcs = [guaranteed(f"g{i}", 1000) for i in range(5)]
    pcs += [guaranteed("g2cpu", 2000), burstable("b1", 100, 200), burstable("b2", 100, 200)]
    containers = [runtime.create(pc) for pc in pcs]
    # The premise, so that a change of placement makes this fail rather than test nothing.
    assert [runtime.cpus[c.id] for c in containers[-3:]] == ["3-4", "15", "15"]
    return containers


def assert_none_on(runtime: Runtime, containers: list[Container], cpus: CpuSet) -> None:
    for c in containers:
        got = CpuSet.parse(runtime.cpus[c.id] or "")
        assert got and got.isdisjoint(cpus), (c.id, str(got))


@pytest.mark.parametrize("setup", [grouped, per_cpu_claims], ids=["grouped", "per-cpu"])
def test_synchronize_keeps_natives_off_the_claims_cpus(
    tmp_path: Path, setup: Callable[[Path], Started], caplog: pytest.LogCaptureFixture
) -> None:
    policy, runtime, _ = setup(tmp_path)
    containers = natives(runtime)
    assert_none_on(runtime, containers, SET_APART)
    before = dict(runtime.cpus)

    with caplog.at_level(logging.INFO):
        pods, reported = runtime.reported()
        runtime.apply(policy.synchronize(pods, reported))

    assert_none_on(runtime, containers, SET_APART)
    assert runtime.cpus == before  # every placement was valid: all are kept where they run
    assert "no CPU left" not in caplog.text
    assert "re-allocating" not in caplog.text


@pytest.mark.parametrize("setup", [grouped, per_cpu_claims], ids=["grouped", "per-cpu"])
def test_a_reconfiguration_keeps_natives_off_the_claims_cpus(
    tmp_path: Path, setup: Callable[[Path], Started], caplog: pytest.LogCaptureFixture
) -> None:
    policy, runtime, spec = setup(tmp_path)
    containers = natives(runtime)
    before = dict(runtime.cpus)

    with caplog.at_level(logging.INFO):
        runtime.apply(policy.reconfigure(spec))

    assert_none_on(runtime, containers, SET_APART)
    assert runtime.cpus == before
    assert "no CPU left" not in caplog.text
    assert "re-allocating" not in caplog.text


def test_a_claim_fits_after_synchronize_wherever_the_scheduler_saw_room(tmp_path: Path) -> None:
    """The shrunk failure's consequence: the whole of NUMA node #1's group claimed after a
    Synchronize, as the scheduler may (capacity 3, nothing consumed)."""
    policy, runtime, _ = grouped(tmp_path)
    natives(runtime)
    pods, reported = runtime.reported()
    runtime.apply(policy.synchronize(pods, reported))

    group = CpuSet.parse("4-7")
    cpus = policy.pick_claim_cpus([(group, 3)])
    uid = "00000000-0000-4000-8000-00000000000a"
    grant = ClaimGrant(uid, "default", cpus, "a" * 32, f"x/cpu={uid}", grouped=True)
    runtime.apply(policy.claim_cpus(grant))

    assert cpus == CpuSet.parse("5-7")
    assert all(CpuSet.parse(c or "").isdisjoint(cpus) for c in runtime.cpus.values())
