"""The Dockerfile, which cannot be built here (no container engine): what can be checked."""

from __future__ import annotations

import importlib.util
import json
import re

import yaml

from tests.helm.crds import POLICIES, ROOT, chart

DOCKERFILE = ROOT / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    return [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1]) for ln in lines]


def test_entrypoint_runs_the_package_module() -> None:
    (entrypoint,) = [arg for op, arg in instructions() if op == "ENTRYPOINT"]
    command = json.loads(entrypoint)
    assert command == ["python", "-m", "nri_resmgr"]
    assert importlib.util.find_spec("nri_resmgr.__main__") is not None


def test_runtime_stage_is_python_311_slim_and_installs_the_wheel() -> None:
    stages = [arg for op, arg in instructions() if op == "FROM"]
    assert stages and all(s.startswith("python:3.11-slim") for s in stages)
    runs = " ".join(arg for op, arg in instructions() if op == "RUN")
    assert "pip install" in runs and "tools/genproto.py" in runs


def test_copied_sources_exist() -> None:
    for op, arg in instructions():
        if op == "COPY" and not arg.startswith("--from"):
            for source in arg.split()[:-1]:
                assert (ROOT / source).exists(), source


def test_charts_use_this_image_and_its_entrypoint() -> None:
    for policy in POLICIES:
        values = yaml.safe_load((chart(policy) / "values.yaml").read_text())
        assert values["image"]["name"] == "nri-resmgr"
    daemonset = ROOT / "helm" / "common" / "templates" / "daemonset.yaml"
    assert "command:" not in daemonset.read_text(), "the chart must rely on the image ENTRYPOINT"
