"""The pure rules: group label, CR names, precedence, identity, status entries."""

from __future__ import annotations

import datetime
import logging

import pytest

from nri_resmgr.agent.selection import (
    ConfigKey,
    GroupChoice,
    choose_group,
    effective_cr,
    group_cr_name,
    kind_for_policy,
    labels_of,
    node_cr_name,
    warn_deprecated,
)
from nri_resmgr.agent.status import failure_entry, rfc3339, status_patch, success_entry
from nri_resmgr.agent.tracker import object_after
from nri_resmgr.errors import ConfigError
from nri_resmgr.kube import EventType, WatchEvent

LABEL = "config.nri/group"


def cr(name: str, uid: str = "u1", generation: int = 1) -> dict[str, object]:
    return {"metadata": {"name": name, "uid": uid, "generation": generation}}


def test_cr_names() -> None:
    assert node_cr_name("worker-1") == "node.worker-1"
    assert group_cr_name("gpu") == "group.gpu"
    assert group_cr_name(None) == "default"
    assert group_cr_name("") == "default"


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({}, GroupChoice(None)),
        ({LABEL: "gpu"}, GroupChoice("gpu")),
        ({LABEL: ""}, GroupChoice(None)),
        ({"group.config.nri": "old"}, GroupChoice("old", "group.config.nri")),
        ({"resource-policy.nri.io/group": "older"},
         GroupChoice("older", "resource-policy.nri.io/group")),
        ({"group.config.nri": "a", "resource-policy.nri.io/group": "b"},
         GroupChoice("a", "group.config.nri")),
        ({LABEL: "new", "group.config.nri": "old"}, GroupChoice("new")),
        ({LABEL: "", "group.config.nri": "old"}, GroupChoice("old", "group.config.nri")),
    ],
)  # fmt: skip
def test_choose_group(labels: dict[str, str], expected: GroupChoice) -> None:
    assert choose_group(labels, LABEL) == expected


def test_a_custom_group_label_replaces_the_default_one() -> None:
    labels = {LABEL: "ignored", "example.com/pool": "fast"}
    assert choose_group(labels, "example.com/pool") == GroupChoice("fast")
    assert choose_group({LABEL: "x"}, "example.com/pool").group is None


def test_deprecated_label_warns_naming_the_replacement(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        warn_deprecated(GroupChoice("old", "group.config.nri"), LABEL)
        warn_deprecated(GroupChoice("new"), LABEL)
    (record,) = caplog.records
    assert "group.config.nri=old is deprecated" in record.getMessage()
    assert f"{LABEL}=old" in record.getMessage()


def test_labels_of_a_missing_or_unlabelled_node() -> None:
    assert labels_of(None) == {}
    assert labels_of({"metadata": {}}) == {}
    assert labels_of({"metadata": {"labels": {LABEL: "g"}}}) == {LABEL: "g"}


def test_node_cr_wins_else_group_else_nothing() -> None:
    node, group = cr("node.n"), cr("default")
    assert effective_cr(node, group) is node
    assert effective_cr(node, None) is node
    assert effective_cr(None, group) is group
    assert effective_cr(None, None) is None


def test_config_key_is_uid_and_generation() -> None:
    assert ConfigKey.of(cr("a", "u1", 3)) == ConfigKey("u1", 3)
    assert ConfigKey.of(cr("a", "u1", 3)) != ConfigKey.of(cr("a", "u2", 3))  # recreated
    assert ConfigKey.of(cr("a", "u1", 3)) != ConfigKey.of(cr("a", "u1", 4))  # spec edited
    assert ConfigKey.of({"metadata": {}}) == ConfigKey("", 0)


def test_kind_for_policy() -> None:
    assert kind_for_policy("template") == "TemplatePolicy"
    assert kind_for_policy("topology-aware") == "TopologyAwarePolicy"
    assert kind_for_policy("balloons") == "BalloonsPolicy"
    with pytest.raises(ConfigError, match="unknown policy 'nope'"):
        kind_for_policy("nope")


def test_object_after_each_event_type() -> None:
    a, b = cr("x", generation=1), cr("x", generation=2)
    assert object_after(None, WatchEvent(EventType.RESET, None, "1", (a,))) is a
    assert object_after(a, WatchEvent(EventType.RESET, None, "2", ())) is None
    assert object_after(None, WatchEvent(EventType.ADDED, a, "3")) is a
    assert object_after(a, WatchEvent(EventType.MODIFIED, b, "4")) is b
    assert object_after(b, WatchEvent(EventType.DELETED, b, "5")) is None


def test_status_entries_and_patch() -> None:
    moment = datetime.datetime(
        2026, 12, 2, 13, 4, 5, tzinfo=datetime.timezone(datetime.timedelta(hours=2))
    )
    assert rfc3339(moment) == "2026-12-02T11:04:05Z"
    assert success_entry(4, moment) == {
        "status": "Success", "generation": 4, "errors": "", "timestamp": "2026-12-02T11:04:05Z",
    }  # fmt: skip
    failed = failure_entry(5, ["spec.a: bad", "spec.b: worse"], moment)
    assert (failed["status"], failed["generation"]) == ("Failure", 5)
    assert failed["errors"] == "spec.a: bad; spec.b: worse"
    assert status_patch("n1", None) == {"status": {"nodes": {"n1": None}}}
    assert status_patch("n1", failed) == {"status": {"nodes": {"n1": failed}}}
