"""The fleet smoke: 50 agents against one real kube-apiserver v1.35.4 + etcd with the chart
applied, through start-up, a steady minute, a config change and an API server restart; the
budgets (tests/fleet/budgets.py) asserted on the API server's request counts, never on times.
``nox -s fleet`` runs the same scenarios at 50 to 1,000 agents with a 10-minute steady window.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fleet import budgets
from tests.fleet.cluster import ACCOUNT
from tests.fleet.report import summary
from tests.fleet.run import run_fleet

pytestmark = pytest.mark.integration

AGENTS = 50


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    workdir: Path = tmp_path_factory.mktemp("fleet")
    result = run_fleet(AGENTS, workdir, processes=2, steady_seconds=60, down_seconds=10)
    print(summary(result))
    return result


def test_every_scenario_reached_every_agent(fleet: dict[str, Any]) -> None:
    for name in ("startup", "steady", "config_change", "restart"):
        assert name in fleet, f"{name} did not run"
        assert "incomplete" not in fleet[name], fleet[name]["incomplete"]


def test_startup_is_within_six_requests_per_node_and_lists_nothing(fleet: dict[str, Any]) -> None:
    startup = fleet["startup"]
    assert budgets.refused(startup) == 0, startup["requests"]  # 50 agents: no retry at all
    assert startup["total"] <= budgets.STARTUP_PER_NODE * AGENTS, startup["by_verb_resource"]
    assert budgets.counts(startup, "LIST") == 0
    # Each agent's three watches, opened once each: the state came on them.
    assert budgets.counts(startup, "WATCH") == budgets.WATCHES_PER_NODE * AGENTS, (
        budgets.reopens_note(startup),
        startup["server_closed_watches"],
    )


def test_the_watch_caches_account_of_the_watches_it_closed_is_read(fleet: dict[str, Any]) -> None:
    # Listed per resource even when none was closed, so that a re-opened watch can be put
    # down to an unresponsive close, a re-initialized cache, or neither (docs/fleet.md).
    for name in ("startup", "restart"):
        closed = fleet[name]["server_closed_watches"]
        assert {"nodes", "resourceslices"} <= closed.keys(), (name, closed)
    assert set(fleet["startup"]["watch_reopens"]) >= {"nodes", "resourceslices"}


def test_steady_state_asks_nothing_but_watch_renewals(fleet: dict[str, Any]) -> None:
    steady = fleet["steady"]
    assert steady["total"] == budgets.counts(steady, "WATCH"), steady["by_verb_resource"]


def test_a_config_change_is_one_status_write_per_node(fleet: dict[str, Any]) -> None:
    change = fleet["config_change"]
    assert budgets.counts(change, "LIST", "GET") == 0, change["by_verb_resource"]
    assert budgets.status_writes(change) <= AGENTS + budgets.FAILURE_ROOM
    # The CR's status is bounded: its writes, each sent to every agent, are not per node.
    cr_writes = change["by_verb_resource"].get("PATCH topologyawarepolicies/status", 0)
    assert cr_writes <= budgets.FAILURE_ROOM
    assert change["config_cr_status_entries"] <= budgets.FAILURE_ROOM


def test_an_apiserver_restart_lists_nothing_and_the_change_made_meanwhile_arrives(
    fleet: dict[str, Any],
) -> None:
    restart = fleet["restart"]
    assert budgets.counts(restart, "LIST") == 0, restart["by_verb_resource"]
    assert restart["seconds_until_change_reported"] is not None
    assert restart["seconds_until_watches_back"] is not None


def test_no_request_was_turned_away_by_priority_and_fairness(fleet: dict[str, Any]) -> None:
    for name in ("startup", "steady", "config_change", "restart"):
        assert budgets.rejected(fleet[name]) == 0, (name, fleet[name]["rejected_429"])


def test_the_agents_run_in_the_charts_priority_level(fleet: dict[str, Any]) -> None:
    dispatched = fleet["startup"]["flow_schemas"]
    assert dispatched.get(f"{ACCOUNT}->{ACCOUNT}", 0) >= budgets.WATCHES_PER_NODE * AGENTS
    assert not any(k.startswith("kube-system-service-accounts") for k in dispatched), dispatched


def test_no_budget_is_broken(fleet: dict[str, Any]) -> None:
    assert budgets.violations(fleet) == []
