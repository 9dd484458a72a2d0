"""What the agents may ask of the API server, per node, in each fleet scenario (docs/fleet.md).

Budgets are on request counts, which do not depend on how fast the machine is; times are
reported, never held to. What an overloaded API server refuses (429, 5xx) the agent sends
again: those retries depend on the machine's load, so a budget counts first attempts, and
the refusals are reported beside it (``refused``). After an API server restart, though, no
429 of priority and fairness is allowed at all: spreading the reconnects is the agents' job.
``violations`` names every budget a run's figures break: the smoke
test (``test_fleet_smoke.py``) asserts there are none, ``nox -s fleet`` prints them.
"""

from __future__ import annotations

from typing import Any

from nri_resmgr.agent.status import FAILURE_ROOM

STARTUP_PER_NODE = 6
"""Requests per node from start until ready: its three watches (Node, config CRs, its
ResourceSlices), the slice's create, the NodeResourceTopology apply (carrying the node's
config report) and at most one status write into the config CR. The Node's registration is
kubelet's, not counted."""
WATCHES_PER_NODE = 3
WATCH_MINUTES = 5
"""A watch is renewed after 5 to 10 minutes: in steady state that is all an agent asks."""
STATUS_RESOURCES = ("topologyawarepolicies/status", "events", "noderesourcetopologies")
"""Where a node's report goes: the config CR's status, an Event, its NRT."""
REPORTED_VERBS = ("PATCH", "POST", "APPLY")


def counts(window: dict[str, Any], *verbs: str) -> int:
    return sum(n for key, n in window["by_verb_resource"].items() if key.split()[0] in verbs)


def status_writes(window: dict[str, Any]) -> int:
    """Reports written (first attempts: a write refused with 429 or 5xx is sent again)."""
    return sum(
        n for key, n in window["requests"].items()
        if _reported(key) and not _refused_code(key.rsplit(" ", 1)[-1])
    )  # fmt: skip


def _reported(request_key: str) -> bool:
    verb, resource, subresource, _code = request_key.split(" ")  # "PATCH <plural> status 200"
    where = f"{resource}/{subresource}" if subresource else resource
    return verb in REPORTED_VERBS and where in STATUS_RESOURCES


def _refused_code(code: str) -> bool:
    return code == "429" or code.startswith("5")


def refused(window: dict[str, Any]) -> int:
    """Requests the API server answered 429 or 5xx: each is retried by the agent, so it is a
    request beyond the first attempt, caused by the server's load, not by the agent's logic
    (on this machine the API server shares two cores with other work)."""
    return sum(n for key, n in window["requests"].items() if _refused_code(key.rsplit(" ", 1)[-1]))


def first_attempts(window: dict[str, Any]) -> int:
    return int(window["total"]) - refused(window)


def rejected(window: dict[str, Any]) -> int:
    """Requests priority and fairness turned away with 429 (overload, not start-up)."""
    return round(sum(window["rejected_429"].values()))


def watch_reopens(window: dict[str, Any], agents: int) -> dict[str, dict[str, int]]:
    """Per watched resource at start-up, where each agent opens one watch: the watches opened
    again (first attempts beyond one per agent), those the server ended cleanly (code 200),
    and how many re-opens can follow a watcher the watch cache closed as unresponsive
    (``after_terminated``: at most one re-open per terminated watcher). A re-initialized
    cache ends every watch on its resource, so ``cache_reinitialized`` is reported beside."""
    opened: dict[str, int] = {}
    ended: dict[str, int] = {}
    for key, n in window["requests"].items():
        verb, resource, _subresource, code = key.split(" ")
        if verb != "WATCH" or _refused_code(code):
            continue
        opened[resource] = opened.get(resource, 0) + n
        if code == "200":
            ended[resource] = ended.get(resource, 0) + n
    closed = window.get("server_closed_watches", {})
    out = {}
    for resource, n in sorted(opened.items()):
        reopened = max(0, n - agents)
        by_server = closed.get(resource, {"terminated": 0, "cache_reinitialized": 0})
        out[resource] = {
            "reopened": reopened,
            "ended_200": ended.get(resource, 0),
            "terminated": by_server["terminated"],
            "after_terminated": min(reopened, by_server["terminated"]),
            "cache_reinitialized": by_server["cache_reinitialized"],
        }
    return out


def reopens_note(window: dict[str, Any]) -> str:
    """The re-opened watches of a start-up and what the server says ended them, in words."""
    parts = [
        f"{resource} {r['reopened']} re-opened ({r['after_terminated']} after a watcher closed "
        f"as unresponsive, cache re-initialized {r['cache_reinitialized']}x)"
        for resource, r in window.get("watch_reopens", {}).items()
        if r["reopened"]
    ]
    return "; ".join(parts)


def violations(result: dict[str, Any]) -> list[str]:
    """Every budget the figures of one fleet run break (empty: all held)."""
    n = result["agents"]
    found: list[str] = []
    for name, window in result.items():
        if isinstance(window, dict) and "incomplete" in window:
            found.append(f"{name}: not every agent got there: {window['incomplete']}")
    if "startup" in result:
        s = result["startup"]
        if first_attempts(s) > STARTUP_PER_NODE * n:
            found.append(f"start-up: {first_attempts(s) / n:.2f} requests per node (first "
                         f"attempts) > {STARTUP_PER_NODE}; watches: "
                         f"{reopens_note(s) or 'none re-opened'}")  # fmt: skip
        if counts(s, "LIST"):
            found.append(f"start-up: {counts(s, 'LIST')} LISTs (the state comes on the watch)")
    if "steady" in result:
        s = result["steady"]
        others = s["total"] - counts(s, "WATCH")
        if others:
            found.append(f"steady: {others} requests that are not watch renewals "
                         f"({s['by_verb_resource']})")  # fmt: skip
        renewals = WATCHES_PER_NODE * n * max(1.0, s["minutes"] / WATCH_MINUTES)
        if counts(s, "WATCH") > renewals:
            found.append(f"steady: {counts(s, 'WATCH')} watch requests > {renewals:.0f}")
    if "config_change" in result:
        s = result["config_change"]
        if status_writes(s) > n + FAILURE_ROOM:
            found.append(f"config change: {status_writes(s)} status writes > one per node "
                         f"({n}) + the CR's {FAILURE_ROOM} entries")  # fmt: skip
        if counts(s, "LIST", "GET"):
            found.append(f"config change: {counts(s, 'LIST', 'GET')} reads (LIST/GET)")
    if "restart" in result:
        s = result["restart"]
        if counts(s, "LIST") > WATCHES_PER_NODE * n:
            found.append(f"restart: {counts(s, 'LIST')} LISTs > one per watch")
        if rejected(s):
            found.append(f"restart: {rejected(s)} requests turned away (429)")
        if s["seconds_until_change_reported"] is None:
            found.append("restart: the change made while it was down did not reach every agent")
        if s["seconds_until_watches_back"] is None:
            found.append("restart: not every watch came back")
    return found
