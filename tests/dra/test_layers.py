"""The DRA split: the kubelet-plugin layer knows nothing of CPUs, and grpclib's private API is
touched in one module only, written against one grpclib release."""

from __future__ import annotations

import ast
import importlib.metadata
import re
from pathlib import Path

from nri_resmgr.dra.kubeletplugin import grpclib_private

ROOT = Path(__file__).resolve().parents[2]
LAYER = ROOT / "nri_resmgr" / "dra" / "kubeletplugin"
ALLOWED = ("nri_resmgr._gen", "nri_resmgr.backoff", "nri_resmgr.errors",
           "nri_resmgr.instrumentation", "nri_resmgr.kube", "nri_resmgr.shorten",
           "nri_resmgr.dra.kubeletplugin")  # fmt: skip
"""What the layer may import of the package: nothing of CPUs, policies or the manager."""


def imports_of(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("nri_resmgr")}


def test_the_kubelet_plugin_layer_imports_nothing_of_cpus_policies_or_the_manager() -> None:
    offending = {
        path.name: sorted(m for m in imports_of(path) if not m.startswith(ALLOWED))
        for path in sorted(LAYER.glob("*.py"))
    }
    assert {name: bad for name, bad in offending.items() if bad} == {}


def identifiers(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
    return names


def test_no_name_in_the_kubelet_plugin_layer_is_about_cpus() -> None:
    said = {
        path.name: sorted(n for n in identifiers(path) if "cpu" in n.lower())
        for path in sorted(LAYER.glob("*.py"))
    }
    assert {name: words for name, words in said.items() if words} == {}


PRIVATE = re.compile(
    r"\.(_server|_protocol_factory|_mapping|_handlers|_stream|_tasks)\b|__gc_step__"
)


def test_grpclibs_private_attributes_are_used_in_one_module_only() -> None:
    users = sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "nri_resmgr").rglob("*.py")
        if "_gen" not in path.parts
        and "grpclib" in path.read_text()
        and PRIVATE.search(path.read_text())
    )
    assert users == ["nri_resmgr/dra/kubeletplugin/grpclib_private.py"]


def test_grpclib_is_the_release_its_private_api_was_read_from() -> None:
    # A different grpclib may have moved what grpclib_private reaches into: read that module
    # against the new release's source, then update GRPCLIB_VERSION and the pin together.
    installed = importlib.metadata.version("grpclib")
    assert installed == grpclib_private.GRPCLIB_VERSION
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'"grpclib=={grpclib_private.GRPCLIB_VERSION}"' in pyproject
