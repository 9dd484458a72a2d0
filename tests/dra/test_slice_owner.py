"""The slice's owner reference is part of what the publisher keeps true: the Node's current
UID (a re-created Node has a new one) with ``controller: true``."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from nri_resmgr.dra.kubeletplugin.slice_spec import DesiredSlice, SliceOwner
from tests.dra.fake_kube import FakeKube
from tests.dra.test_publisher import DRIVER, NODE, NODE_UID, Setup, eventually, only_slice, running

__all__ = ["running"]  # the fixture, imported for the tests below

DESIRED = DesiredSlice(DRIVER, NODE, NODE, (), SliceOwner(NODE, NODE_UID))


def owned_slice(**ref_changes: Any) -> dict[str, Any]:
    obj = DESIRED.new_object("v1", 0)
    ref = obj["metadata"]["ownerReferences"][0]
    ref.update(ref_changes)
    obj["metadata"]["ownerReferences"] = [{k: v for k, v in ref.items() if v is not None}]
    return obj


def test_the_slice_as_written_matches() -> None:
    assert DESIRED.matches(owned_slice(), "v1")


@pytest.mark.parametrize(
    "change",
    [
        {"uid": "uid-of-an-older-node"},
        {"name": "other-node"},
        {"kind": "Pod"},
        {"apiVersion": "v2"},
        {"controller": False},
        {"controller": None},
    ],
    ids=["uid", "name", "kind", "apiVersion", "controller-false", "controller-missing"],
)
def test_an_owner_reference_that_differs_in_one_field_does_not_match(
    change: dict[str, Any],
) -> None:
    assert not DESIRED.matches(owned_slice(**change), "v1")


async def test_a_recreated_node_gets_its_new_uid_into_the_owner_reference(
    running: Any, autojump_clock: trio.abc.Clock
) -> None:
    s: Setup = await running(FakeKube({NODE: NODE_UID}))
    await eventually(lambda: s.publisher.syncs >= 1)
    s.kube.nodes[NODE] = "uid-of-the-new-node"
    s.publisher.trigger()

    def owner_uid() -> str:
        return str(only_slice(s.kube)["metadata"]["ownerReferences"][0]["uid"])

    await eventually(lambda: owner_uid() == "uid-of-the-new-node")
    assert only_slice(s.kube)["spec"]["pool"]["generation"] == 1


async def test_an_owner_reference_without_controller_is_restored(
    running: Any, autojump_clock: trio.abc.Clock
) -> None:
    s: Setup = await running(FakeKube({NODE: NODE_UID}))
    await eventually(lambda: s.publisher.syncs >= 1)
    del only_slice(s.kube)["metadata"]["ownerReferences"][0]["controller"]
    s.publisher.trigger()
    await eventually(
        lambda: only_slice(s.kube)["metadata"]["ownerReferences"][0].get("controller") is True
    )
