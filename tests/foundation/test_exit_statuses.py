"""The documented exits of ``python -m nri_resmgr``, walked as a process (README, "Running"):
0 a clean stop, 1 a fatal failure, 2 a refused command line or initial configuration.

A start-up failure is one error line naming its cause (a configuration: one per problem),
never a traceback. Exit 0 is walked beside these: ``test_process.py`` (SIGTERM) and
``test_signals_and_exit.py`` (SIGINT).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CONFIGS = Path(__file__).parent / "configs"
TWO_CPUS = Path(__file__).parents[1] / "sysfs" / "fixtures" / "epyc-kvm-2cpu"
HEADER = "apiVersion: config.nri/v1alpha1\nkind: TopologyAwarePolicy\n"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nri_resmgr", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if " ERROR " in line or "error:" in line]


def config(tmp_path: Path, spec: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(HEADER + spec)
    return str(path)


def test_a_host_root_without_sys_is_fatal_exit_1_in_one_line(tmp_path: Path) -> None:
    proc = run("--config-file", str(CONFIGS / "topology-aware.yaml"),
               "--host-root", str(tmp_path))  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    online = tmp_path / "sys/devices/system/cpu/online"
    assert [line.split(" ERROR ", 1)[1].split(": ", 1)[1] for line in error_lines(proc.stderr)] == [
        f"cannot start: {online}: cannot read the online CPUs"
    ]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nri-plugin-index", "x"], "nri-resmgr: error: "),
        (["--config-file", "/nonexistent/config.yaml"], "configuration error: /nonexistent/"),
    ],
)
def test_a_refused_command_line_or_missing_file_exits_2_in_one_line(
    args: list[str], message: str
) -> None:
    proc = run(*args)
    assert proc.returncode == 2, proc.stderr
    lines = error_lines(proc.stderr)
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("spec:\n  reservedResources: {cpu: 'cpuset:5'}\n",
         "spec.reservedResources.cpu: reserved CPUs 5 are not within the available CPUs 0-1"),
        ("spec:\n  reservedResources: {cpu: '8'}\n",
         "spec.reservedResources.cpu: '8' needs 8 CPUs but only 2 non-isolated CPUs are "
         "available (0-1)"),
    ],
)  # fmt: skip
def test_a_configuration_the_machine_refuses_exits_2_naming_the_key(
    tmp_path: Path, spec: str, problem: str
) -> None:
    proc = run("--config-file", config(tmp_path, spec), "--host-root", str(TWO_CPUS))
    assert proc.returncode == 2, proc.stderr
    assert [line.split("configuration error: ", 1)[1] for line in error_lines(proc.stderr)] == [
        problem
    ]
    assert "Traceback" not in proc.stderr


def test_a_config_file_nested_3000_deep_exits_2_in_one_line(tmp_path: Path) -> None:
    path = config(tmp_path, "spec:\n  x: " + "[" * 3000 + "]" * 3000 + "\n")
    proc = run("--config-file", path)
    assert proc.returncode == 2, proc.stderr
    assert [line.split("configuration error: ", 1)[1] for line in error_lines(proc.stderr)] == [
        f"{path}: invalid YAML at line 4, column 67: nested deeper than 64 levels"
    ]
    assert "Traceback" not in proc.stderr
