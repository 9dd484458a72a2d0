"""The floor plan: which room (top-level package or module of ``nri_resmgr``) imports which.

The layout table of docs/development.md ("Layout") is the map: one row per room with its
floor and the rooms it imports. These tests read every import of the package from its
source (module level, ``TYPE_CHECKING`` blocks and function bodies alike) and hold the
code to that map:

- each room imports exactly the rooms its row names, and only rooms on lower floors;
- no module imports itself back through others, hidden or not;
- an import deferred into a function or a ``TYPE_CHECKING`` block is one of ``DEFERRED``,
  each with the reason it is deferred (otherwise it would hide an arrow or a cycle).
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "nri_resmgr"
LAYOUT = ROOT / "docs" / "development.md"

_START_UP = "start-up imports only what this run uses"
DEFERRED: dict[tuple[str, str], str] = {
    ("__main__", "app"): f"{_START_UP}: the daemon's stack only to run the daemon",
    ("__main__", "sim.command"): f"{_START_UP}: simulate needs no daemon services",
    ("__main__", "sim.demo"): f"{_START_UP}: the demo needs no daemon services",
    ("app", "agent.agent"): f"{_START_UP}: without cluster access no config agent",
    ("app", "agent.report"): f"{_START_UP}: without cluster access no config agent",
    ("app", "observability.nrt"): f"{_START_UP}: NRT export needs a cluster",
    ("app", "kube"): f"{_START_UP}: without cluster access no httpx",
    ("app", "dra.setup"): f"{_START_UP}: without DRA no grpclib and no trio-asyncio",
    ("observability.setup", "kube"): f"{_START_UP}: without cluster access no httpx",
    ("observability.setup", "observability.nrt"): f"{_START_UP}: NRT export needs a cluster",
    ("instrumentation.metrics", "instrumentation.prom"): (
        "prometheus_client is imported only once metrics are exported"
    ),
    ("policies", "policies.balloons"): f"{_START_UP}: a daemon runs one policy",
    ("policies", "policies.template"): f"{_START_UP}: a daemon runs one policy",
    ("policies", "policies.topology_aware"): f"{_START_UP}: a daemon runs one policy",
}
"""(importer, imported), names relative to ``nri_resmgr``: the deliberately deferred imports."""


@attrs.frozen
class Import:
    importer: str
    imported: str
    deferred: bool
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {
        module_name(p): p
        for p in sorted(PACKAGE.rglob("*.py"))
        if "_gen" not in p.relative_to(PACKAGE).parts
    }


def _targets(node: ast.Import | ast.ImportFrom, importer: str, is_package: bool) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    if node.level:
        base = importer.split(".")[: len(importer.split(".")) - node.level + is_package]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        assert node.module is not None
        source = node.module
    for alias in node.names:  # ``from pkg import module`` names the module itself
        yield f"{source}.{alias.name}" if f"{source}.{alias.name}" in _KNOWN else source


def imports_of(name: str, path: Path) -> Iterator[Import]:
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"

    def walk(node: ast.AST, deferred: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            inner = deferred or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                inner = True
            if isinstance(child, ast.Import | ast.ImportFrom):
                for target in _targets(child, name, is_package):
                    if target == "nri_resmgr" or target.startswith("nri_resmgr."):
                        yield Import(name, target, deferred, child.lineno)
            yield from walk(child, inner)

    yield from walk(tree, False)


_KNOWN = set(modules())
IMPORTS = [i for name, path in modules().items() for i in imports_of(name, path)]


def short(module: str) -> str:
    return module.removeprefix("nri_resmgr").removeprefix(".") or "__init__"


def room(module: str) -> str:
    """``nri_resmgr.policies.topology_aware.engine`` -> ``policies/``; ``nri_resmgr.app`` ->
    ``app.py``; the package itself (its version) -> ``__init__.py``."""
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__.py"
    if (PACKAGE / parts[1]).is_dir():
        return parts[1] + "/"
    return parts[1] + ".py"


@attrs.frozen
class Row:
    floor: int
    imports: frozenset[str]


def layout_table() -> dict[str, Row]:
    """The layout rows (docs/development.md) for ``nri_resmgr/`` rooms: floor, path, what,
    imports."""
    rows: dict[str, Row] = {}
    for line in LAYOUT.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].isdigit():
            continue
        path = re.fullmatch(r"`nri_resmgr/(.+)`", cells[1])
        assert path, f"layout table: a room is a `nri_resmgr/...` path, not {cells[1]}"
        named = re.findall(r"`([^`]+)`", cells[3])
        rows[path.group(1)] = Row(int(cells[0]), frozenset(named))
    return rows


def room_imports() -> dict[str, set[str]]:
    found: dict[str, set[str]] = defaultdict(set)
    for i in IMPORTS:
        a, b = room(i.importer), room(i.imported)
        if a != b:
            found[a].add(b)
    return found


def rooms_in_tree() -> set[str]:
    return {room(m) for m in modules()} | {"_gen/"}


def test_the_layout_table_has_one_row_per_room_of_the_tree() -> None:
    table = layout_table()
    assert set(table) == rooms_in_tree(), (
        f"rooms without a row: {sorted(rooms_in_tree() - set(table))}; "
        f"rows without a room: {sorted(set(table) - rooms_in_tree())}"
    )


def test_each_room_imports_exactly_what_its_row_names() -> None:
    table, found = layout_table(), room_imports()
    wrong = {
        r: f"imports {sorted(found.get(r, set()))}, row says {sorted(row.imports)}"
        for r, row in table.items()
        if set(found.get(r, set())) != set(row.imports)
    }
    assert not wrong, f"a new arrow between rooms is an architecture change: {wrong}"


def test_every_room_imports_only_rooms_on_lower_floors() -> None:
    table = layout_table()
    upward = [
        f"{a} (floor {row.floor}) -> {b} (floor {table[b].floor})"
        for a, row in table.items()
        for b in row.imports
        if b in table and table[b].floor >= row.floor
    ]
    assert not upward


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, set())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_cycle_finder_finds_a_hidden_loop() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_itself_back_through_others() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for i in IMPORTS:
        if i.importer != i.imported:
            graph[i.importer].add(i.imported)
    assert _cycles(graph) == []


def test_deferred_imports_are_the_listed_ones_each_with_its_reason() -> None:
    deferred = {(short(i.importer), short(i.imported)) for i in IMPORTS if i.deferred}
    assert deferred - set(DEFERRED) == set(), "defer an import only for a reason, listed here"
    assert set(DEFERRED) - deferred == set(), "no longer deferred: drop it from DEFERRED"
    assert all(reason for reason in DEFERRED.values())


@pytest.mark.parametrize("kind", ["function", "TYPE_CHECKING"])
def test_a_deferred_import_is_seen_wherever_it_hides(kind: str, tmp_path: Path) -> None:
    body = {
        "function": "def f():\n    from nri_resmgr.app import main\n",
        "TYPE_CHECKING": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from nri_resmgr import app\n",
    }[kind]
    path = tmp_path / "probe.py"
    path.write_text(body)
    (found,) = imports_of("nri_resmgr.probe", path)
    assert (found.imported, found.deferred) == ("nri_resmgr.app", True)
