"""Upstream's ``verify`` over what the runtime holds: the same variables and helpers.

nri-plugins' e2e ``verify 'EXPR'`` evaluates EXPR in Python with, per running container
``podXcY``, the sets its process may use, named as ``test/e2e/lib/topology.py`` names them
(ids zero-padded to the machine's widest): ``cpus`` ``{"cpu04"}``, ``nodes`` ``{"node1"}``,
``packages`` ``{"package0"}``, ``dies`` ``{"package0/die0"}``, ``cores``
``{"node1/core0"}``, ``threads`` ``{"node1/core0/thread1"}`` (all from the allowed CPUs),
``mems`` ``{"node1"}`` (the allowed memory nodes), and the helpers ``disjoint_sets``,
``set_ids``, ``cpu_ids``, ``node_ids``, ... A container the runtime did not pin may use
every online CPU and memory node, as its process would.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.sysfs import System


def disjoint_sets(*sets: set[Any]) -> bool:
    seen: set[Any] = set()
    for s in sets:
        if not seen.isdisjoint(s):
            return False
        seen = seen | set(s)
    return True


def set_ids(names: Iterable[str], chars: str = "[a-z]") -> set[Any]:
    out: set[Any] = set()
    for name in names:
        if "/" in name:
            out.add(tuple(int(re.sub(chars, "", part)) for part in name.split("/")))
        else:
            out.add(int(re.sub(chars, "", name)))
    return out


def _ids(chars: str) -> Callable[[Iterable[str]], set[Any]]:
    return lambda names: set_ids(names, chars)


HELPERS: dict[str, Any] = {
    "disjoint_sets": disjoint_sets,
    "set_ids": set_ids,
    "package_ids": _ids("[package]"),
    "die_ids": _ids("[packagedie]"),
    "node_ids": _ids("[node]"),
    "core_ids": _ids("[nodecore]"),
    "thread_ids": _ids("[nodecorethread]"),
    "cpu_ids": _ids("[cpu]"),
}


class Names:
    """Upstream's names for one machine's CPUs and memory nodes."""

    def __init__(self, system: System) -> None:
        self.system = system
        cpus = system.cpus.values()
        self._w = {
            "cpu": max(len(str(c.id)) for c in cpus),
            "node": max(len(str(c.node)) for c in cpus),
            "package": max(len(str(c.package)) for c in cpus),
            "die": max(len(str(c.die)) for c in cpus),
        }
        self._core_ids = _core_ids(system)

    def _n(self, kind: str, value: int) -> str:
        return f"{kind}{str(value).zfill(self._w[kind])}"

    def node(self, n: int) -> str:
        return self._n("node", n)

    def cpu_view(self, cpus: CpuSet) -> dict[str, set[str]]:
        view: dict[str, set[str]] = {k: set() for k in ("cpus", "nodes", "packages", "dies",
                                                          "cores", "threads")}  # fmt: skip
        for i in cpus:
            c = self.system.cpus[i]
            node, pkg = self._n("node", c.node), self._n("package", c.package)
            core = f"{node}/core{self._core_ids[i]}"
            thread = sorted(c.threads).index(i)
            view["cpus"].add(self._n("cpu", i))
            view["nodes"].add(node)
            view["packages"].add(pkg)
            view["dies"].add(f"{pkg}/{self._n('die', c.die)}")
            view["cores"].add(core)
            view["threads"].add(f"{core}/thread{thread}")
        return view


def _core_ids(system: System) -> dict[int, int]:
    """A core number per CPU, the same for a core's threads (upstream shows core_id; only
    equality within a node matters to the expressions)."""
    out: dict[int, int] = {}
    for i, c in sorted(system.cpus.items()):
        out[i] = min(c.threads)
    return out


def namespace(
    names: Names,
    cpus: Mapping[str, str | None],
    mems: Mapping[str, str | None],
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The variables ``verify`` expressions see, for running containers named podXcY."""
    online = names.system.online
    all_mems = CpuSet(names.system.nodes)
    env: dict[str, Any] = {k: {} for k in ("cpus", "nodes", "packages", "dies", "cores",
                                           "threads", "mems")}  # fmt: skip
    for name, text in cpus.items():
        allowed = CpuSet.parse(text) & online if text else online
        for k, v in names.cpu_view(allowed).items():
            env[k][name] = v
        mtext = mems.get(name)
        env["mems"][name] = {names.node(n) for n in (CpuSet.parse(mtext) if mtext else all_mems)}
    env.update(HELPERS)
    env.update(extra or {})
    return env


def check(env: Mapping[str, Any], *expressions: str) -> None:
    """Assert each expression as upstream's ``verify`` does: the first false one fails."""
    for expr in expressions:
        try:
            ok = eval(expr, dict(env))  # upstream's own test expressions
        except (KeyError, IndexError) as e:
            raise AssertionError(f"verify {expr!r}: {type(e).__name__} {e}") from e
        if not ok:
            raise AssertionError(f"verify {expr!r} is false; {_state(env)}")


def _state(env: Mapping[str, Any]) -> str:
    cpus, mems = env["cpus"], env["mems"]
    parts = [
        f"{c}: cpus {_compact(cpus[c])} mems {','.join(sorted(mems[c]))}" for c in sorted(cpus)
    ]
    return "placement: " + "; ".join(parts)


def _compact(names: set[str]) -> str:
    return str(CpuSet(int(re.sub("[a-z]", "", n)) for n in names))
