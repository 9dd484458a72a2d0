"""Every bad input of a Prepare: a per-claim error naming the cause, nothing left behind
(no policy claim, no CDI spec, no record, shared containers where they were), and a state
file that is never half-written."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from nri_resmgr.cpuset import CpuSet
from nri_resmgr.dra.cpu import state
from nri_resmgr.dra.cpu.state import ClaimStore, write_atomically
from nri_resmgr.kube import Unavailable
from tests.dra.claim_setup import NODE, Node, claim_object, make_node
from tests.policies.workload import besteffort, guaranteed

UID = "11111111-2222-3333-4444-555555555555"
OTHER = "99999999-8888-7777-6666-555555555555"


async def prepare_error(node: Node, uid: str = UID) -> str:
    outcomes = await node.preparer.prepare([node.ref(uid)])
    assert outcomes[uid].devices == ()
    return outcomes[uid].error


def assert_nothing_left(node: Node, shared_before: dict[str, str | None]) -> None:
    assert UID not in node.policy.claims.claims
    assert not [p for p in node.cdi_dir.glob("*") if UID in p.name]
    record_file = node.state_dir / "dra-claims.json"
    if record_file.exists():
        assert UID not in json.loads(record_file.read_text())["claims"]
    assert node.runtime.cpus == shared_before


@pytest.fixture
def node(tmp_path: Path) -> Node:
    n = make_node(tmp_path)
    n.runtime.create(besteffort("be"))
    return n


Case = Callable[[Node], None]


def missing(node: Node) -> None:
    pass  # no claim object at all


def replaced(node: Node) -> None:
    node.claims.add(claim_object(OTHER, ["cpu6"], name=f"claim-{UID}"))


def not_allocated(node: Node) -> None:
    obj = claim_object(UID, ["cpu6"])
    del obj["status"]
    node.claims.add(obj)


def other_node(node: Node) -> None:
    node.claims.add(claim_object(UID, ["cpu6"], pool="node-2"))


def other_driver(node: Node) -> None:
    node.claims.add(claim_object(UID, ["gpu0"], driver="gpu.example.com"))


def unknown_device(node: Node) -> None:
    node.claims.add(claim_object(UID, ["cpu6", "cpu99"]))


def reserved_device(node: Node) -> None:
    node.claims.add(claim_object(UID, ["cpu0"]))  # reserved: never published


def admin_access(node: Node) -> None:
    node.claims.add(claim_object(UID, ["cpu6"], adminAccess=True))


def api_down(node: Node) -> None:
    node.claims.add(claim_object(UID, ["cpu6"]))
    node.claims.error = Unavailable(503, "ServiceUnavailable", "apiserver is restarting")


@pytest.mark.parametrize(
    ("setup", "cause"),
    [
        (missing, f"ResourceClaim default/claim-{UID} not found"),
        (replaced, f"has UID {OTHER}, kubelet asked for {UID} (the claim was replaced)"),
        (not_allocated, "is not allocated"),
        (other_node, f"is from pool node-2, not this node's pool {NODE}"),
        (
            other_driver,
            "has no allocation result for driver topology-aware.nri.io "
            "(its results are for gpu.example.com)",
        ),
        (unknown_device, "unknown device(s) cpu99"),
        (reserved_device, "unknown device(s) cpu0"),
        (admin_access, "allocated with adminAccess"),
        (api_down, f"cannot read ResourceClaim default/claim-{UID}: "),
    ],
    ids=lambda v: v.__name__ if callable(v) else "",
)
async def test_a_bad_claim_fails_alone_and_leaves_nothing(
    node: Node, setup: Case, cause: str
) -> None:
    setup(node)
    before = dict(node.runtime.cpus)
    error = await prepare_error(node)
    assert cause in error
    assert_nothing_left(node, before)


async def test_cpus_of_another_claim_are_refused(node: Node) -> None:
    node.claims.add(claim_object(OTHER, ["cpu6", "cpu7"]))
    assert (await node.preparer.prepare([node.ref(OTHER)]))[OTHER].error == ""
    node.claims.add(claim_object(UID, ["cpu7", "cpu8"]))
    before = dict(node.runtime.cpus)
    error = await prepare_error(node)
    assert f"cpus 7 are already claimed by claim {OTHER}" in error
    assert_nothing_left(node, before)
    assert node.policy.claims.cpus() == {OTHER: CpuSet([6, 7])}


async def test_cpus_held_exclusively_by_a_container_are_refused(node: Node) -> None:
    native = node.runtime.create(guaranteed("native", 2000))
    held = CpuSet.parse(node.runtime.cpus[native.id] or "")
    node.claims.add(claim_object(UID, [f"cpu{min(held)}"]))
    before = dict(node.runtime.cpus)
    error = await prepare_error(node)
    assert "held exclusively by container default/native/c0" in error
    assert_nothing_left(node, before)


async def test_an_unwritable_cdi_directory_fails_the_claim_and_returns_the_cpus(
    tmp_path: Path,
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the CDI directory should be")
    node = make_node(tmp_path, cdi_dir=blocker / "cdi")
    node.runtime.create(besteffort("be"))
    before = dict(node.runtime.cpus)
    node.claims.add(claim_object(UID, ["cpu6"]))
    error = await prepare_error(node)
    assert f"cannot write CDI spec {blocker}/cdi/" in error
    assert UID not in node.policy.claims.claims
    assert node.runtime.cpus == before
    assert not (node.state_dir / "dra-claims.json").exists()


async def test_an_unwritable_state_file_fails_the_claim_and_removes_its_cdi_spec(
    node: Node,
) -> None:
    node.state_dir.parent.mkdir(parents=True, exist_ok=True)
    node.state_dir.write_text("a file where the state directory should be")
    node.driver.store = ClaimStore(node.state_dir)
    before = dict(node.runtime.cpus)
    node.claims.add(claim_object(UID, ["cpu6"]))
    error = await prepare_error(node)
    assert f"cannot write DRA state file {node.state_dir}/dra-claims.json" in error
    assert_nothing_left(node, before)


GOOD_RECORD = '{"namespace": "d", "name": "n", "cpus": "6", "results": []}'


@pytest.mark.parametrize(
    ("content", "cause"),
    [
        (f'{{"version": 1, "claims": {{"{OTHER}": {{"namespace": "default", "na',
         "corrupt or truncated"),
        ("", "corrupt or truncated"),
        (f'{{"version": 1, "claims": {{"{OTHER}": {{"namespace": "d"}}}}}}', "KeyError"),
        ('{"version": 7, "claims": {}}', "not a version 1 claim state document"),
        (
            f'{{"version": 1, "claims": {{"{OTHER}": {{"namespace": "d", "name": "n", '
            '"cpus": "x-", "results": []}}}',
            "corrupt or truncated",
        ),
        # Not trusted: nesting that would make the decoder recurse, foreign types, and keys
        # that are no UID (they would name files).
        ('{"version": 1, "claims": {"x": ' + "[" * 3000 + "]" * 3000 + "}}",
         "nested deeper than the format's 5 levels"),
        (f'{{"version": 1, "claims": {{"{OTHER}": {{"namespace": ["d"], "name": "n", '
         '"cpus": "6", "results": []}}}', f"claims.{OTHER}.namespace is not a string"),
        (f'{{"version": 1, "claims": {{"x/../../escaped": {GOOD_RECORD}}}}}',
         "UID 'x/../../escaped' is not a Kubernetes UID"),
    ],
    ids=["truncated", "empty", "missing-key", "future-version", "bad-cpuset", "deep",
         "wrong-type", "uid-as-path"],
)  # fmt: skip
async def test_a_corrupt_state_file_fails_every_claim_and_is_kept(
    tmp_path: Path, content: str, cause: str
) -> None:
    (tmp_path / "state").mkdir()
    path = tmp_path / "state" / "dra-claims.json"
    path.write_text(content)
    node = make_node(tmp_path)
    node.claims.add(claim_object(UID, ["cpu6"]))
    error = await prepare_error(node)
    assert f"DRA state file {path}" in error and cause in error
    unprepared = await node.preparer.unprepare([node.ref(UID)])
    assert cause in unprepared[UID].error
    assert node.policy.claims.cpus() == {}
    assert path.read_text() == content  # the evidence stays; nothing overwrote it


def test_a_write_that_fails_midway_leaves_the_old_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "dra-claims.json"
    write_atomically(path, b'{"old": true}')

    def fail(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(state.os, "fsync", fail)
    with pytest.raises(OSError, match="Input/output error"):
        write_atomically(path, b'{"new": true, "and": "much longer than the old one"}')
    assert path.read_bytes() == b'{"old": true}'
    assert os.listdir(tmp_path) == ["dra-claims.json"]  # no temporary file left
