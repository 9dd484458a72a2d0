"""One error tree: every error the package raises on purpose derives from ``ResmgrError``,
``errors.py`` draws all of it, and every cancellation says why.

The package's source is read as the floor plan reads it (``test_floor_plan.modules``); its
exception classes are found by importing each module.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect

import pytest

from nri_resmgr import errors
from nri_resmgr.errors import ResmgrError
from tests.foundation.test_floor_plan import modules

_BUG = "misuse by the package's own code (a bug), not bad input"
BUILTIN_RAISES: dict[tuple[str, str], str] = {
    ("agent.agent", "RuntimeError"): f"{_BUG}: serve() before attach()",
    ("config.notapplied", "KeyError"): f"{_BUG}: a not-applied key no model has",
    ("dra.kubeletplugin.grpc_server", "RuntimeError"): f"{_BUG}: a gRPC server started twice",
    ("dra.kubeletplugin.grpclib_private", "TypeError"): (
        f"{_BUG}: a handler coroutine driven by another task"
    ),
    ("dra.kubeletplugin.plugin", "ValueError"): f"{_BUG}: an empty driver name",
    ("dra.kubeletplugin.plugin", "RuntimeError"): f"{_BUG}: a plugin started twice",
    ("dra.kubeletplugin.publisher", "ValueError"): f"{_BUG}: a publisher without a node name",
    ("dra.cpu.state", "ValueError"): "caught in state.py and reported as the state file's problem",
    ("dra.cpu.state", "TypeError"): "caught in state.py and reported as the state file's problem",
    ("instrumentation.metrics", "AttributeError"): "a module __getattr__ must raise it",
    ("kube.client", "ValueError"): f"{_BUG}: a patch or object of the wrong shape",
    ("kube.resources", "ValueError"): f"{_BUG}: a namespace given or missing for the resource",
    ("nri.ttrpc_codec", "ValueError"): f"{_BUG}: a stream id over 32 bits",
    ("policies", "ValueError"): f"{_BUG}: policy names come from the config kind or --policy",
    ("policies.balloons.policy", "RuntimeError"): f"{_BUG}: used before setup()",
    ("policies.hardware", "RuntimeError"): f"{_BUG}: used before setup()",
    ("policies.topology_aware.policy", "RuntimeError"): f"{_BUG}: used before setup()",
    ("sim.demo_workload", "ValueError"): f"{_BUG}: the demo's choices are argparse's",
    ("sim.synthetic", "ValueError"): f"{_BUG}: a synthetic layout that contradicts itself",
}
"""(module, builtin exception): why that module raises a builtin exception on purpose."""


def _trees() -> dict[str, ast.Module]:
    return {name: ast.parse(path.read_text()) for name, path in modules().items()}


def _is_builtin_exception(name: str) -> bool:
    value = getattr(builtins, name, None)
    return isinstance(value, type) and issubclass(value, BaseException)


def _raised_name(node: ast.Raise) -> str | None:
    exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
    return exc.id if isinstance(exc, ast.Name) else None


def package_exceptions() -> list[type[BaseException]]:
    found = []
    for name in modules():
        module = importlib.import_module(name)
        found += [
            cls
            for _, cls in inspect.getmembers(module, inspect.isclass)
            if issubclass(cls, BaseException) and cls.__module__ == module.__name__
        ]
    return found


def test_every_exception_class_of_the_package_is_a_resmgr_error() -> None:
    outside = [f"{c.__module__}.{c.__qualname__}" for c in package_exceptions()
               if not issubclass(c, ResmgrError)]  # fmt: skip
    assert outside == []


def test_the_tree_in_errors_docstring_names_every_class() -> None:
    doc = errors.__doc__ or ""
    missing = [f"{c.__module__}.{c.__qualname__}" for c in package_exceptions()
               if c.__name__ not in doc]  # fmt: skip
    assert missing == []


def test_builtin_exceptions_are_raised_only_where_listed_with_a_reason() -> None:
    raised = {
        (module, name)
        for module, tree in _trees().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Raise)
        and (name := _raised_name(node)) is not None
        and _is_builtin_exception(name)
    }
    assert {(m.removeprefix("nri_resmgr."), e) for m, e in raised} == set(BUILTIN_RAISES)


def test_every_cancel_says_why() -> None:
    silent = [
        f"{module}:{node.lineno}"
        for module, tree in _trees().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "cancel"
        and not node.args
        and not node.keywords
    ]
    assert silent == []


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (errors.ConfigError("x"), 2),
        (errors.UsageError("x"), 2),
        (errors.Fatal("x"), 1),
        (errors.Recoverable("x"), 1),
        (ResmgrError("x"), 1),
    ],
)
def test_an_error_carries_the_exit_status_the_readme_documents(
    error: ResmgrError, status: int
) -> None:
    assert error.exit_status == status


def test_stdlib_bases_are_kept_where_callers_catch_them() -> None:
    from nri_resmgr.cpus.errors import AllocationError
    from nri_resmgr.cpuset import CpuSetError
    from nri_resmgr.nri.wire import WireError
    from nri_resmgr.quantity import QuantityError
    from nri_resmgr.sysfs import SysfsError

    assert all(issubclass(c, ValueError) for c in (CpuSetError, QuantityError, WireError))
    assert issubclass(AllocationError, RuntimeError)
    assert issubclass(SysfsError, errors.Fatal)
