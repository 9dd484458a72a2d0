"""Every example in the docs runs. A YAML block is marked by the comment line before it,
``<!-- example: KIND [ARG] -->``, and loaded as it is written: a policy CR through the
daemon's loader (a spec fragment as the spec of the kind its marker names), helm values
through ``helm template`` (and the config CR it renders through the loader again),
Kubernetes objects through the real kube-apiserver's server-side dry-run with strict field
validation; the ``simulate`` examples are run and their output compared."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import yaml

from nri_resmgr.config import load_document, structure_spec
from nri_resmgr.config.fields import key_of
from tests.helm.helmbuild import ensure_helm
from tests.kube.apiserver import ADMIN_TOKEN, ApiServer, start_apiserver

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
MARK = re.compile(r"<!-- example: (\S+)(?: (\S+))? -->")


@attrs.frozen
class Example:
    page: str
    line: int
    kind: str
    arg: str
    text: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def fenced_blocks() -> Iterator[tuple[str, int, str, str, str]]:
    """(page, line, info string, the line before the fence, body) of every fenced block."""
    for page in sorted(DOCS.glob("*.md")):
        lines = page.read_text().splitlines()
        i = 0
        while i < len(lines):
            if lines[i].lstrip().startswith("```"):
                indent = len(lines[i]) - len(lines[i].lstrip())
                info = lines[i].strip()[3:]
                end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
                body = "\n".join(x[indent:] for x in lines[i + 1 : end])
                yield page.name, i + 1, info, lines[i - 1] if i else "", body
                i = end
            i += 1


def examples(kind: str) -> list[Example]:
    out = []
    for page, line, _, before, body in fenced_blocks():
        m = MARK.fullmatch(before.strip())
        if m and m.group(1) == kind:
            out.append(Example(page, line, kind, m.group(2) or "", body))
    return out


def test_every_yaml_example_is_marked_to_be_run() -> None:
    unmarked = [f"{page}:{line}" for page, line, info, before, _ in fenced_blocks()
                if info == "yaml" and not MARK.fullmatch(before.strip())]  # fmt: skip
    assert unmarked == []


def test_the_docs_have_examples_of_every_kind() -> None:
    for kind in ("policy", "policy-spec", "helm-values", "kube", "simulate-output"):
        assert examples(kind), kind


@pytest.mark.parametrize("example", examples("policy"), ids=str)
def test_policy_example_loads(example: Example) -> None:
    for doc in yaml.safe_load_all(example.text):
        load_document(doc)


@pytest.mark.parametrize("example", examples("policy-spec"), ids=str)
def test_policy_spec_example_loads_as_that_kinds_spec(example: Example) -> None:
    # A fragment of a spec: with the one key every spec needs, it must load as that kind's.
    fragment = yaml.safe_load(example.text)
    base = {"reservedResources": {"cpu": "1"}}
    spec, plain = (structure_spec(base | fragment, example.arg), structure_spec(base, example.arg))
    by_key = {key_of(a): a.name for a in attrs.fields(type(spec))}
    unchanged = [k for k in fragment if getattr(spec, by_key[k]) == getattr(plain, by_key[k])]
    assert unchanged == []  # every section the example sets is taken


@pytest.fixture(scope="module")
def helm() -> Path:
    return ensure_helm()


@pytest.mark.integration
@pytest.mark.parametrize("example", examples("helm-values"), ids=str)
def test_helm_values_example_renders_a_config_the_daemon_loads(
    example: Example, helm: Path, tmp_path: Path
) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(example.text)
    chart = ROOT / "helm" / example.arg
    result = subprocess.run(
        [str(helm), "template", "resmgr", str(chart), "-n", "kube-system", "-f", str(values)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    config = [d for d in docs if d.get("apiVersion") == "config.nri/v1alpha1"]
    assert len(config) == 1
    loaded = load_document(config[0])
    given = yaml.safe_load(example.text)["config"]
    assert _within(given, config[0]["spec"]), (given, config[0]["spec"])
    cpu = loaded.spec.reserved_resources.cpu
    assert cpu is not None
    assert cpu.text == str(given["reservedResources"]["cpu"])


def _within(given: Any, rendered: Any) -> bool:
    """Whether every value of ``given`` is in ``rendered`` (which adds the chart's defaults)."""
    if isinstance(given, dict):
        return isinstance(rendered, dict) and all(
            k in rendered and _within(v, rendered[k]) for k, v in given.items()
        )
    return bool(given == rendered)


@pytest.fixture(scope="module")
def apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    server = start_apiserver(tmp_path_factory.mktemp("docs-apiserver"))
    try:
        yield server
    finally:
        server.shutdown()


def _collection(obj: dict[str, Any]) -> str:
    group_version, kind = obj["apiVersion"], obj["kind"]
    plural = kind.lower() + ("es" if kind.endswith("s") else "s")
    prefix = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    namespaced = kind not in ("DeviceClass", "Namespace", "Node")
    return f"{prefix}/namespaces/default/{plural}" if namespaced else f"{prefix}/{plural}"


@pytest.mark.integration
@pytest.mark.parametrize("example", examples("kube"), ids=str)
def test_kubernetes_example_passes_the_apiservers_dry_run(
    example: Example, apiserver: ApiServer
) -> None:
    with httpx.Client(
        base_url=apiserver.url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        verify=apiserver.config().ssl_context(), timeout=30,
    ) as api:  # fmt: skip
        for obj in yaml.safe_load_all(example.text):
            response = api.post(
                _collection(obj), json=obj,
                params={"dryRun": "All", "fieldValidation": "Strict"},
            )  # fmt: skip
            assert response.status_code == 201, (obj["kind"], response.text)


def _simulate_example(example: Example) -> tuple[list[str], list[str]]:
    """The command shown (after ``$``, continuation lines joined) and the output lines."""
    lines = example.text.splitlines()
    command, rest = lines[0].removeprefix("$ "), lines[1:]
    while command.endswith("\\"):
        command = command[:-1] + rest.pop(0).strip()
    return shlex.split(command), rest


@pytest.mark.parametrize("example", examples("simulate-output"), ids=str)
def test_the_simulate_example_prints_what_the_page_shows(example: Example, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    argv, shown = _simulate_example(example)
    assert argv[:2] == ["nri-resmgr", "simulate"]
    plot = argv.index("--plot") + 1
    argv[plot] = str(tmp_path / argv[plot])
    result = subprocess.run(
        [sys.executable, "-m", "nri_resmgr", *argv[1:]],
        cwd=ROOT, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    out = (result.stdout + result.stderr).replace(str(tmp_path) + "/", "")
    assert result.returncode == 0, out
    assert [x.rstrip() for x in out.splitlines()] == [x.rstrip() for x in shown]


def _quick_start() -> list[str]:
    """The shell commands of the README's quick start, in order."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", section, re.S)


def test_the_quick_start_is_the_same_in_the_readme_and_getting_started() -> None:
    demo, suite = _quick_start()
    page = (DOCS / "getting-started.md").read_text()
    assert f"```sh\n{demo}\n```" in page
    assert f"```sh\n{suite}\n```" in page


def test_the_quick_start_test_command_is_what_ci_runs() -> None:
    _, suite = _quick_start()
    install, run = suite.split(" && ")
    ci = (ROOT / ".ci" / "run").read_text()
    assert run in ci
    assert install.split()[-1] in ci  # the same pinned nox


def test_the_quick_start_demo_runs_as_written() -> None:
    demo, _ = _quick_start()
    install, run = demo.split(" && ")
    assert install == "python3 -m pip install -e ."  # the tests session has installed it so
    argv = shlex.split(run)
    assert argv[:3] == ["python3", "-m", "nri_resmgr"]
    result = subprocess.run(
        [sys.executable, *argv[1:]], cwd=ROOT, capture_output=True, text=True, timeout=300,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "cpus" in result.stdout


def test_the_readmes_simulate_command_is_the_checked_example() -> None:
    text = (ROOT / "README.md").read_text()
    (command,) = re.findall(r"```sh\n(nri-resmgr simulate .+?)\n```", text, re.S)
    checked = examples("simulate-output")[0].text.removeprefix("$ ")
    assert checked.startswith(command)
