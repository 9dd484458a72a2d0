"""Hybrid core kinds from ``/sys/devices/cpu_{core,atom}/cpus`` settled as nri-plugins'
``pkg/sysfs`` checkCoreKinds settles them: a partial listing is completed, a bad one is
refused (here: logged, and the machine taken as non-hybrid)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from nri_resmgr.sim.synthetic import N4C16, write_sysfs
from nri_resmgr.sysfs import discover
from nri_resmgr.sysfs.cpudetails import CoreKind

P, E = CoreKind.PERFORMANCE, CoreKind.EFFICIENT


def _kinds(root: Path, core: str | None, atom: str | None) -> dict[str, str]:
    write_sysfs(root, N4C16)  # two threads a core: 0-1, 2-3, ...
    for name, cpus in (("cpu_core", core), ("cpu_atom", atom)):
        if cpus is not None:
            (root / "sys/devices" / name).mkdir(parents=True)
            (root / "sys/devices" / name / "cpus").write_text(f"{cpus}\n")
    kinds = discover(str(root)).details.core_kinds
    return {k.name: str(v) for k, v in kinds.items()}


@pytest.mark.parametrize(
    ("core", "atom", "expected"),
    [
        (None, None, {}),
        ("0-15", None, {}),
        ("0-15", "", {}),
        ("0-11", "12-15", {"PERFORMANCE": "0-11", "EFFICIENT": "12-15"}),
        # One kind given (upstream's OVERRIDE_SYS_ATOM_CPUS=4-5 of test08): the rest is the
        # other kind.
        (None, "4-5", {"EFFICIENT": "4-5", "PERFORMANCE": "0-3,6-15"}),
        ("0-1,4-5", "", {"PERFORMANCE": "0-1,4-5", "EFFICIENT": "2-3,6-15"}),
        # ... completed to whole cores first.
        (None, "4", {"EFFICIENT": "4-5", "PERFORMANCE": "0-3,6-15"}),
    ],
)
def test_core_kinds_are_settled_as_upstream(
    tmp_path: Path, core: str | None, atom: str | None, expected: dict[str, str]
) -> None:
    assert _kinds(tmp_path, core, atom) == expected


@pytest.mark.parametrize(
    ("core", "atom", "problem"),
    [
        ("0-11", "11-15", "misses threads of its cores (10)"),
        ("0-12", "12-15", "misses threads of its cores (13)"),
        ("0-13", "12-15", "overlap (12-13)"),
        ("0-9", "12-15", "online CPUs 10-11 are in neither"),
    ],
)
def test_inconsistent_core_kinds_are_named_and_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, core: str, atom: str, problem: str
) -> None:
    with caplog.at_level(logging.ERROR, logger="nri_resmgr.sysfs.cpudetails"):
        assert _kinds(tmp_path, core, atom) == {}
    assert [r.getMessage() for r in caplog.records if problem in r.getMessage()]
