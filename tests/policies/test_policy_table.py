"""The policy table: each name makes that policy, and only its own modules are imported."""

from __future__ import annotations

import subprocess
import sys

import pytest

from nri_resmgr.policies import POLICIES, create_policy


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_each_name_makes_the_policy_of_that_name(name: str) -> None:
    assert create_policy(name).name == name


def test_an_unknown_name_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown policy 'nope' \(known: balloons, template"):
        create_policy("nope")


def test_a_daemon_of_one_policy_does_not_import_the_others() -> None:
    probe = (
        "import sys; from nri_resmgr.policies import create_policy; "
        "create_policy('topology-aware'); "
        "print(sorted(m for m in sys.modules if m.startswith('nri_resmgr.policies.')))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded = out.stdout
    assert "nri_resmgr.policies.topology_aware" in loaded
    assert "policies.balloons" not in loaded
