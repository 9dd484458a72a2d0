"""Command-line parsing: nri-plugins flags, environment, checks at the edge."""

from __future__ import annotations

import subprocess
import sys

import pytest

from nri_resmgr import __version__
from nri_resmgr.cli import UsageError, parse_options


def test_defaults_match_nri_plugins() -> None:
    o = parse_options(["--config-file", "x.yaml"], env={})
    assert o.nri_socket == "/var/run/nri/nri.sock"
    assert (o.nri_plugin_name, o.nri_plugin_index) == ("resource-manager", "90")
    assert o.config_namespace == "kube-system"
    assert o.kubeconfig == ""
    assert not o.has_cluster_access


def test_flags_beat_nri_environment_which_beats_defaults() -> None:
    env = {"NRI_PLUGIN_NAME": "from-env", "NRI_PLUGIN_IDX": "42", "NODE_NAME": "n1"}
    o = parse_options(["--config-file", "x"], env=env)
    assert (o.nri_plugin_name, o.nri_plugin_index, o.node_name) == ("from-env", "42", "n1")
    o = parse_options(["--config-file", "x", "--nri-plugin-index", "10"], env=env)
    assert o.nri_plugin_index == "10"


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--config-file", "x", "--nri-plugin-index", "9"], {}, "must be exactly two digits"),
        (["--config-file", "x", "--nri-plugin-name", "a b"], {}, "use only letters, digits"),
        (["--policy", "template"], {}, "NODE_NAME is not set"),
        ([], {"NODE_NAME": "n"}, "--policy is required"),
    ],
)
def test_bad_flags_are_usage_errors(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_options(argv, env=env)


def test_cluster_mode_needs_node_and_policy() -> None:
    o = parse_options(["--policy", "balloons", "--kubeconfig", "k"], env={"NODE_NAME": "n"})
    assert o.has_cluster_access
    assert o.policy == "balloons"


def test_version_flag() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "nri_resmgr", "--version"], capture_output=True, text=True
    )
    assert out.returncode == 0
    assert out.stdout.strip() == f"nri-resmgr {__version__}"


def test_the_nrt_interval_is_two_seconds_unless_given() -> None:
    assert parse_options(["--config-file", "x"], env={}).nrt_interval == 2.0
    given = parse_options(["--config-file", "x", "--nrt-interval", "10"], env={})
    assert given.nrt_interval == 10.0


@pytest.mark.parametrize("bad", ["0", "-1", "soon"])
def test_an_nrt_interval_that_is_no_positive_number_is_refused(
    bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse_options(["--config-file", "x", "--nrt-interval", bad], env={})
    assert "--nrt-interval" in capsys.readouterr().err
