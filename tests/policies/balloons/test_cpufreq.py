"""CPU classes on balloons: control.cpu.classes frequency limits written to a synthetic sysfs
tree under --host-root, read back, and restored when the class no longer applies."""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from nri_resmgr.config import load_document
from nri_resmgr.config.models import BalloonType, ControlConfig, CpuClass, CpuControl
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.errors import ConfigError
from nri_resmgr.policies.balloons import BalloonsPolicy
from nri_resmgr.resmgr.policy import PolicyEnv
from tests.peers import missing_peer
from tests.policies.workload import Runtime, balloons_spec, guaranteed, start
from tests.sysfs.fakesys import N4C16

CPU = "sys/devices/system/cpu"
ORIGINAL = {"scaling_min_freq": "800000", "scaling_max_freq": "3500000",
            "scaling_governor": "powersave"}  # fmt: skip
UNCORE = {"min_freq_khz": "1200000", "max_freq_khz": "2400000"}
SLOW = CpuClass(min_freq=1_000_000, max_freq=2_000_000, uncore_max_freq=1_800_000)
IDLE = CpuClass(max_freq=1_500_000, freq_governor="powersave")
TYPE = BalloonType(name="slow", namespaces=("slow",), cpu_class="slow")


def _tree(root: Path, cpus: range = range(16)) -> None:
    for cpu in cpus:
        d = root / CPU / f"cpu{cpu}" / "cpufreq"
        d.mkdir(parents=True, exist_ok=True)
        for name, value in ORIGINAL.items():
            (d / name).write_text(value + "\n")
    for package in (0, 1):
        d = root / CPU / "intel_uncore_frequency" / f"package_{package:02d}_die_00"
        d.mkdir(parents=True, exist_ok=True)
        for name, value in UNCORE.items():
            (d / name).write_text(value + "\n")


def _freq(root: Path, cpu: int, name: str = "scaling_max_freq") -> str:
    return (root / CPU / f"cpu{cpu}" / "cpufreq" / name).read_text().strip()


def _uncore(root: Path, package: int, name: str = "max_freq_khz") -> str:
    path = root / CPU / "intel_uncore_frequency" / f"package_{package:02d}_die_00" / name
    return path.read_text().strip()


def _policy(root: Path, idle_class: str = "", **classes: CpuClass) -> BalloonsPolicy:
    spec = balloons_spec(
        balloon_types=(TYPE,),
        idle_cpu_class=idle_class,
        control=ControlConfig(cpu=CpuControl(classes=dict(classes))),
    )
    p = BalloonsPolicy()
    start(p, root, N4C16, spec)
    _tree(root)  # after start: the sysfs writer lays the topology out first
    return p


def test_a_balloons_cpus_get_its_class_and_give_it_back(tmp_path: Path) -> None:
    p = _policy(tmp_path, slow=SLOW)
    rt = Runtime(p)
    c = rt.create(guaranteed("s", 2000, namespace="slow"))
    cpus = CpuSet.parse(rt.cpus[c.id] or "")
    assert len(cpus) == 2
    for cpu in range(16):
        want = ("1000000", "2000000") if cpu in cpus else ("800000", "3500000")
        assert (_freq(tmp_path, cpu, "scaling_min_freq"), _freq(tmp_path, cpu)) == want, cpu
        assert _freq(tmp_path, cpu, "scaling_governor") == "powersave"  # class leaves it
    package = p.system.cpus[min(cpus)].package
    assert _uncore(tmp_path, package) == "1800000"
    assert _uncore(tmp_path, 1 - package) == "2400000"
    assert _uncore(tmp_path, package, "min_freq_khz") == "1200000"
    # The balloon goes with its last member: every file it changed has its old value back.
    rt.remove(c)
    assert all(_freq(tmp_path, cpu) == "3500000" for cpu in range(16))
    assert all(_freq(tmp_path, cpu, "scaling_min_freq") == "800000" for cpu in range(16))
    assert _uncore(tmp_path, package) == "2400000"


def test_idle_cpus_are_in_the_idle_class(tmp_path: Path) -> None:
    p = _policy(tmp_path, idle_class="idle", slow=SLOW, idle=IDLE)
    rt = Runtime(p)
    # Setup wrote nothing yet: the tree was laid out after it; the first decision does.
    c = rt.create(guaranteed("s", 1000, namespace="slow"))
    (own,) = CpuSet.parse(rt.cpus[c.id] or "")
    free = p.state.free()
    assert free and own not in free
    assert all(_freq(tmp_path, cpu) == "1500000" for cpu in free)
    assert _freq(tmp_path, own) == "2000000"
    balloons = CpuSet.union_all(b.cpus for b in p.state.balloons)
    assert all(_freq(tmp_path, cpu) == "3500000" for cpu in balloons - CpuSet({own}))


def test_a_class_removed_by_reconfiguration_is_restored(tmp_path: Path) -> None:
    p = _policy(tmp_path, slow=SLOW)
    rt = Runtime(p)
    c = rt.create(guaranteed("s", 1000, namespace="slow"))
    (own,) = CpuSet.parse(rt.cpus[c.id] or "")
    assert _freq(tmp_path, own) == "2000000"
    rt.apply(p.reconfigure(balloons_spec(balloon_types=(TYPE,))))
    assert rt.cpus[c.id] == str(own)  # placement unchanged, only the class is gone
    assert _freq(tmp_path, own) == "3500000"
    assert _freq(tmp_path, own, "scaling_min_freq") == "800000"
    # Changed settings: only the changed file is rewritten.
    faster = CpuClass(min_freq=1_000_000, max_freq=2_500_000)
    spec = balloons_spec(
        balloon_types=(TYPE,), control=ControlConfig(cpu=CpuControl(classes={"slow": faster}))
    )
    rt.apply(p.reconfigure(spec))
    assert (_freq(tmp_path, own, "scaling_min_freq"), _freq(tmp_path, own)) == (
        "1000000", "2500000"
    )  # fmt: skip


def test_no_cpufreq_in_sysfs_is_logged_once_and_placement_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spec = balloons_spec(
        balloon_types=(TYPE,), control=ControlConfig(cpu=CpuControl(classes={"slow": SLOW}))
    )
    p = BalloonsPolicy()
    start(p, tmp_path, N4C16, spec)  # no cpufreq files at all
    rt = Runtime(p)
    with caplog.at_level(logging.ERROR):
        first = rt.create(guaranteed("a", 1000, namespace="slow"))
        rt.create(guaranteed("b", 1000, namespace="slow"))
    assert rt.cpus[first.id]
    errors = [r.getMessage() for r in caplog.records if "cpu control" in r.getMessage()]
    assert errors and len(errors) == len(set(errors))  # each file named once
    assert any("scaling_max_freq: cannot read" in e for e in errors)


def test_writes_are_logged_as_their_own_step(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    p = _policy(tmp_path, slow=SLOW)
    rt = Runtime(p)
    with caplog.at_level(logging.INFO):
        c = rt.create(guaranteed("s", 1000, namespace="slow"))
    (own,) = CpuSet.parse(rt.cpus[c.id] or "")
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("cpu control:")]
    assert f"cpu control: /{CPU}/cpu{own}/cpufreq/scaling_max_freq = 2000000 (class 'slow', " \
        "balloon slow[0])" in said  # fmt: skip
    caplog.clear()
    with caplog.at_level(logging.INFO):
        rt.create(guaranteed("other", 1000))  # no class change: nothing written, nothing said
    assert not [r for r in caplog.records if r.getMessage().startswith("cpu control:")]


@contextmanager
def read_only_mount(directory: Path) -> Iterator[None]:
    """``directory`` as a container sees /host/sys: on a filesystem mounted read-only."""
    if os.geteuid() != 0:
        missing_peer("mounting a read-only filesystem needs root (CI runs as root)")
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro", "tmpfs", str(directory)], check=True)
    try:
        yield
    finally:
        subprocess.run(["umount", str(directory)], check=True)


def test_classes_over_a_read_only_sys_are_refused_at_load_naming_why(tmp_path: Path) -> None:
    # The charts mount /host/sys read-only: classes there could never be applied (issue 34
    # item 7). Refused at start and on reconfigure, not accepted and inert.
    plain = BalloonsPolicy()
    start(plain, tmp_path, N4C16, balloons_spec(balloon_types=(TYPE,)))
    classed = balloons_spec(
        balloon_types=(TYPE,),
        control=ControlConfig(cpu=CpuControl(classes={"slow": SLOW})),
    )
    with read_only_mount(tmp_path / CPU / "cpu0" / "cpufreq"):
        with pytest.raises(ConfigError) as refused:
            plain.reconfigure(classed)
        assert refused.value.errors == [
            f"spec.control.cpu.classes: /{CPU}/cpu0/cpufreq is on a read-only filesystem, so "
            "CPU classes (slow) could never be applied; mount it writable (the charts do when "
            "config.control.cpu.classes is set) or remove the classes"
        ]
        with pytest.raises(ConfigError, match="read-only filesystem"):
            BalloonsPolicy().setup(classed, PolicyEnv(host_root=str(tmp_path)))
        # A class nothing names is never written: no reason to refuse it.
        unused = balloons_spec(control=ControlConfig(cpu=CpuControl(classes={"slow": SLOW})))
        plain.reconfigure(unused)


@pytest.mark.parametrize("governor", ["performance\n", "../../x", "a" * 16, "Performance", " "])
def test_a_governor_that_is_no_governor_name_is_a_config_error(governor: str) -> None:
    document = {
        "apiVersion": "config.nri/v1alpha1",
        "kind": "BalloonsPolicy",
        "spec": {"reservedResources": {"cpu": "1"},
                 "control": {"cpu": {"classes": {"fast": {"freqGovernor": governor}}}}},
    }  # fmt: skip
    with pytest.raises(ConfigError, match=r"classes\.fast\.freqGovernor: .* is not a cpufreq"):
        load_document(document)
    document["spec"]["control"]["cpu"]["classes"]["fast"]["freqGovernor"] = "schedutil"  # type: ignore[index]
    load_document(document)
