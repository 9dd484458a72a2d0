from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import attrs
import pytest

from tests.helm.helmbuild import ensure_helm

RELEASE = "resmgr"
NAMESPACE = "kube-system"

# How each DRA state is asked for on the helm command line; "unset" adds nothing, and the
# charts' values.yaml has no dra key.
DRA_STATES: dict[str, tuple[str, ...]] = {
    "enabled": ("--set", "config.dra.enabled=true"),
    "disabled": ("--set", "config.dra.enabled=false"),
    "unset": (),
}


@attrs.frozen
class Helm:
    binary: Path

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(self.binary), *args], capture_output=True, text=True, check=False
        )
        if check and result.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stderr}")
        return result

    def template(self, chart: Path, *args: str) -> str:
        return self.run("template", RELEASE, str(chart), "--namespace", NAMESPACE, *args).stdout

    def lint(self, chart: Path, args: Sequence[str]) -> subprocess.CompletedProcess[str]:
        return self.run("lint", "--strict", "--namespace", NAMESPACE, str(chart), *args)


@pytest.fixture(scope="session")
def helm() -> Helm:
    return Helm(ensure_helm())
