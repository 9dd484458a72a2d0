"""The Dockerfile's static shape (tests/runtime/test_image.py builds and runs it for real)."""

from __future__ import annotations

import importlib.util
import json
import re
import tomllib

import yaml
from packaging.requirements import Requirement

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


def test_every_stage_starts_from_the_base_pinned_by_digest() -> None:
    stages = [arg for op, arg in instructions() if op == "FROM"]
    assert stages and all(s.split()[0] == "${BASE_IMAGE}" for s in stages)
    (base,) = [arg for op, arg in instructions() if op == "ARG" and arg.startswith("BASE_IMAGE=")]
    assert re.fullmatch(r"BASE_IMAGE=python:3\.11-slim[\w.-]*@sha256:[0-9a-f]{64}", base)


def test_dependencies_come_from_the_hashed_lock_and_pip_leaves_the_final_image() -> None:
    runs = [arg for op, arg in instructions() if op == "RUN"]
    final = runs[-1]
    assert "--require-hashes -r /tmp/runtime.lock" in final
    assert "uninstall --yes pip" in final
    lock = (ROOT / "requirements" / "runtime.lock").read_text()
    pins = re.findall(r"^([a-z0-9_.-]+)==\S+ \\$", lock, re.M)
    assert {"trio", "grpclib", "betterproto", "httpx", "attrs", "cattrs", "pyyaml"} <= set(pins)
    assert all("--hash=sha256:" in block for block in re.split(r"\n(?=\S)", lock) if "==" in block)


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


def test_the_lock_satisfies_every_runtime_dependency_of_pyproject() -> None:
    """A dependency changed in pyproject.toml without `nox -s lock` fails here."""
    lock = (ROOT / "requirements" / "runtime.lock").read_text()
    pinned = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+) \\$", lock, re.M))
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for spec in project["dependencies"]:
        req = Requirement(spec)
        name = req.name.lower().replace("_", "-")
        assert name in pinned, f"{name} is not in requirements/runtime.lock"
        assert req.specifier.contains(pinned[name], prereleases=True), (name, pinned[name])
