"""The watch cache's own account of the watches it ended, read from /metrics text, and the
start-up's re-opened watches set beside it (fast: a sample of the exposition format)."""

from __future__ import annotations

from typing import Any

from tests.fleet import budgets, metrics, report

BEFORE = """\
# HELP apiserver_watch_cache_initializations_total [ALPHA] Counter of watch cache initializations broken by resource type.
# TYPE apiserver_watch_cache_initializations_total counter
apiserver_watch_cache_initializations_total{group="",resource="nodes"} 1
apiserver_watch_cache_initializations_total{group="resource.k8s.io",resource="resourceslices"} 1
apiserver_watch_cache_initializations_total{group="",resource="pods"} 1
"""  # noqa: E501

AFTER = """\
# HELP apiserver_terminated_watchers_total [ALPHA] Counter of watchers closed due to unresponsiveness broken by resource type.
# TYPE apiserver_terminated_watchers_total counter
apiserver_terminated_watchers_total{group="resource.k8s.io",resource="resourceslices"} 3
apiserver_terminated_watchers_total{group="",resource="pods"} 9
# HELP apiserver_watch_cache_initializations_total [ALPHA] Counter of watch cache initializations broken by resource type.
# TYPE apiserver_watch_cache_initializations_total counter
apiserver_watch_cache_initializations_total{group="",resource="nodes"} 2
apiserver_watch_cache_initializations_total{group="resource.k8s.io",resource="resourceslices"} 1
apiserver_watch_cache_initializations_total{group="",resource="pods"} 4
"""  # noqa: E501


def test_a_window_counts_unresponsive_closes_and_reinitializations_per_agent_resource() -> None:
    closed = metrics.server_closed_watches(metrics.parse(AFTER), metrics.parse(BEFORE))
    assert closed == {
        "nodes": {"terminated": 0, "cache_reinitialized": 1},
        "resourceslices": {"terminated": 3, "cache_reinitialized": 0},
    }  # pods: not the agents'


def test_a_cache_first_seen_in_the_window_counts_its_first_initialization_as_none() -> None:
    # A new server (the restart), or a custom resource's cache built on its first request.
    closed = metrics.server_closed_watches(metrics.parse(AFTER), {})
    assert closed["nodes"] == {"terminated": 0, "cache_reinitialized": 1}
    assert closed["resourceslices"] == {"terminated": 3, "cache_reinitialized": 0}


def test_a_server_that_closed_nothing_still_lists_the_resources_it_caches() -> None:
    closed = metrics.server_closed_watches(metrics.parse(BEFORE), {})
    assert closed == {
        "nodes": {"terminated": 0, "cache_reinitialized": 0},
        "resourceslices": {"terminated": 0, "cache_reinitialized": 0},
    }


def startup(agents: int, slice_watches: dict[str, int], terminated: int) -> dict[str, Any]:
    requests = {f"WATCH resourceslices  {code}": n for code, n in slice_watches.items()}
    requests["WATCH nodes  open"] = agents
    requests["POST resourceslices  201"] = agents
    return {
        "requests": requests,
        "server_closed_watches": {
            "resourceslices": {"terminated": terminated, "cache_reinitialized": 0},
            "nodes": {"terminated": 0, "cache_reinitialized": 0},
        },
    }


def test_reopened_watches_are_set_beside_the_watchers_the_server_closed() -> None:
    # 10 agents: 10 slice watches open at the end, 4 ended cleanly before (and re-opened),
    # 2 refused with 429 (sent again, not re-opens); the cache closed 3 as unresponsive.
    window = startup(10, {"open": 10, "200": 4, "429": 2}, terminated=3)
    reopens = budgets.watch_reopens(window, agents=10)
    assert reopens["resourceslices"] == {
        "reopened": 4,
        "ended_200": 4,
        "terminated": 3,
        "after_terminated": 3,
        "cache_reinitialized": 0,
    }
    assert reopens["nodes"]["reopened"] == 0
    window["watch_reopens"] = reopens
    assert budgets.reopens_note(window) == (
        "resourceslices 4 re-opened (3 after a watcher closed as unresponsive, "
        "cache re-initialized 0x)"
    )


def test_more_terminated_watchers_than_reopens_explain_no_more_than_the_reopens() -> None:
    reopens = budgets.watch_reopens(startup(10, {"open": 10, "200": 1}, terminated=5), 10)
    assert reopens["resourceslices"]["after_terminated"] == 1


def test_the_tables_tell_a_run_without_the_counters_from_one_where_they_were_zero() -> None:
    assert report._closed({}) == "n/a"
    zeros = {"server_closed_watches": {"nodes": {"terminated": 0, "cache_reinitialized": 0}}}
    assert report._closed(zeros) == "none"
    assert report._closed(zeros, every=True) == "nodes 0/0"
