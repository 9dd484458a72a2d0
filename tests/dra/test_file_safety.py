"""The root daemon's DRA files against someone who can write in the directories it uses, and
against a state file and claim UIDs it must not trust (issue 34, items 2-4).

Each attack is the one a review found working: a symlink planted at the temporary name of the
state file or of a CDI spec (the daemon overwrote its target), a state file whose ``cdiFile``
pointed outside the CDI directory (Unprepare deleted it), a deeply nested state file (a
RecursionError at every start), and a claim UID with ``../`` in it (Prepare wrote outside the
CDI directory).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from nri_resmgr.dra.cpu.cdi import CdiError, CdiWriter
from nri_resmgr.dra.cpu.state import STATE_FILE, ClaimStore
from nri_resmgr.dra.kubeletplugin.files import UnsafePath, read_file, write_file
from tests.dra.claim_setup import DRIVER, Node, claim_object, make_node
from tests.peers import missing_peer
from tests.policies.workload import besteffort

UID = "11111111-2222-3333-4444-555555555555"
VICTIM_TEXT = "precious\n"


@pytest.fixture
def node(tmp_path: Path) -> Node:
    n = make_node(tmp_path)
    n.runtime.create(besteffort("be"))
    return n


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "victim"
    path.write_text(VICTIM_TEXT)
    return path


def cdi_name(uid: str) -> str:
    return f"{DRIVER}-cpu_claim-{uid}.json"


async def prepare(node: Node, uid: str = UID) -> str:
    node.claims.add(claim_object(uid, ["cpu6"]))
    return (await node.preparer.prepare([node.ref(uid)]))[uid].error


# -- item 2: symlinks ----------------------------------------------------------------------


@pytest.mark.parametrize("which", ["state", "cdi"])
async def test_a_symlink_at_a_temporary_name_is_never_written_through(
    node: Node, victim: Path, which: str
) -> None:
    # The names the daemon used to write through, one fixed name per file.
    directory, name = (
        (node.state_dir, STATE_FILE) if which == "state" else (node.cdi_dir, cdi_name(UID))
    )
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f".{name}.tmp").symlink_to(victim)
    assert await prepare(node) == ""
    assert victim.read_text() == VICTIM_TEXT
    assert (directory / name).is_file() and not (directory / name).is_symlink()
    assert UID in (directory / name).read_text()


def test_temporary_names_are_random_and_created_exclusively(tmp_path: Path) -> None:
    names: list[str] = []
    real_open = os.open

    def spy(path: str, flags: int, *args: object, **kw: object) -> int:
        if str(path).endswith(".tmp"):
            names.append(str(path))
            assert flags & os.O_EXCL and flags & os.O_NOFOLLOW and flags & os.O_CREAT
        return real_open(path, flags, *args, **kw)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as m:
        m.setattr(os, "open", spy)
        for _ in range(3):
            write_file(tmp_path, "f.json", b"{}", 0o600, durable=False)
    assert len(names) == 3 and len(set(names)) == 3
    assert sorted(os.listdir(tmp_path)) == ["f.json"]


async def test_a_symlink_planted_at_the_state_file_is_replaced_not_followed(
    node: Node, victim: Path
) -> None:
    node.state_dir.mkdir(parents=True, exist_ok=True)
    (node.state_dir / STATE_FILE).symlink_to(victim)
    node.driver.store = ClaimStore(node.state_dir)
    node.driver.store.load()
    # Reading through it is refused, and says why; the target is left alone.
    assert node.driver.store.broken is not None
    assert "is a symlink; refusing to follow it" in node.driver.store.broken
    assert "is a symlink" in await prepare(node)
    assert victim.read_text() == VICTIM_TEXT


@pytest.mark.parametrize("problem", ["symlink", "foreign-owner", "world-writable", "parent"])
async def test_a_directory_others_control_is_refused_by_name(tmp_path: Path, problem: str) -> None:
    real = tmp_path / "real-cdi"
    real.mkdir()
    cdi = tmp_path / "cdi"
    expected = {
        "symlink": "directory is a symlink",
        "foreign-owner": "directory is owned by uid 65534",
        "world-writable": "directory is writable by group or others (mode 777)",
        "parent": "is writable by others and not sticky",
    }[problem]
    if problem == "symlink":
        cdi.symlink_to(real)
    elif problem == "parent":
        shared = tmp_path / "shared"
        shared.mkdir()
        shared.chmod(0o777)
        cdi = shared / "cdi"
        cdi.mkdir()
    else:
        cdi.mkdir()
        if problem == "foreign-owner":
            if os.geteuid() != 0:
                missing_peer("needs root to chown the directory (CI runs as root)")
            os.chown(cdi, 65534, 65534)
        else:
            cdi.chmod(0o777)
    node = make_node(tmp_path, cdi_dir=cdi)
    error = await prepare(node)
    assert expected in error and "cannot write CDI spec" in error
    assert not list(real.iterdir())
    assert UID not in node.policy.claims.claims  # the CPUs went back


def test_reading_refuses_what_is_not_a_regular_file_and_bounds_the_size(
    tmp_path: Path,
) -> None:
    os.mkfifo(tmp_path / "fifo")  # would block a plain open
    with pytest.raises(UnsafePath, match="is not a regular file"):
        read_file(tmp_path, "fifo", 100)
    (tmp_path / "big").write_bytes(b"x" * 101)
    with pytest.raises(UnsafePath, match="is larger than 100 bytes"):
        read_file(tmp_path, "big", 100)
    assert read_file(tmp_path, "absent", 100) is None
    assert read_file(tmp_path / "no-dir", "absent", 100) is None


# -- item 3: the state file is not trusted ---------------------------------------------------


def state_with(node: Node, claims: dict[str, object]) -> None:
    node.state_dir.mkdir(parents=True, exist_ok=True)
    body = {"version": 1, "claims": claims}
    (node.state_dir / STATE_FILE).write_text(json.dumps(body))


async def test_unprepare_removes_the_spec_named_by_the_uid_not_the_recorded_path(
    tmp_path: Path, victim: Path
) -> None:
    first = make_node(tmp_path)
    assert await prepare(first) == ""
    record = json.loads((first.state_dir / STATE_FILE).read_text())
    record["claims"][UID]["cdiFile"] = str(victim)  # as an earlier version wrote it, forged
    (first.state_dir / STATE_FILE).write_text(json.dumps(record))
    node = first.restart()
    outcome = await node.preparer.unprepare([node.ref(UID)])
    assert outcome[UID].error == ""
    assert victim.read_text() == VICTIM_TEXT
    assert not (node.cdi_dir / cdi_name(UID)).exists()


async def test_records_hold_no_path(node: Node) -> None:
    assert await prepare(node) == ""
    record = json.loads((node.state_dir / STATE_FILE).read_text())["claims"][UID]
    assert "cdiFile" not in record and str(node.cdi_dir) not in json.dumps(record)


async def test_a_deeply_nested_state_file_is_a_clear_error_at_every_claim(
    tmp_path: Path,
) -> None:
    (tmp_path / "state").mkdir()
    path = tmp_path / "state" / STATE_FILE
    path.write_text('{"version": 1, "claims": {"a": ' + "[" * 100_000 + "]" * 100_000 + "}}")
    node = make_node(tmp_path)  # restore runs here: no RecursionError
    error = await prepare(node)
    assert f"DRA state file {path} is corrupt or truncated" in error
    assert "nested deeper than the format's 5 levels" in error


async def test_a_state_file_over_the_size_bound_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nri_resmgr.dra.cpu import state

    monkeypatch.setattr(state, "MAX_STATE_BYTES", 1000)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / STATE_FILE).write_text(" " * 1001)
    node = make_node(tmp_path)
    assert "is larger than 1000 bytes" in await prepare(node)


# -- item 4: claim UIDs -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "uid",
    [
        "x/../../../escaped",
        "../../escaped",
        "uid-1",
        "0B6F1C2E-9D4A-4E57-8A3B-2C1D5E6F7A80",
        UID + "0",
        "",
        UID + "\n",
    ],
)
async def test_a_uid_not_in_the_api_servers_shape_never_reaches_a_path(
    tmp_path: Path, uid: str
) -> None:
    node = make_node(tmp_path)
    before = {p for p in tmp_path.rglob("*")}
    node.claims.add(claim_object(uid, ["cpu6"], name="forged"))
    outcome = (await node.preparer.prepare([node.ref(uid)]))[uid]
    assert ("has no UID" if uid == "" else "is not a Kubernetes UID") in outcome.error
    # Nothing can have been prepared under it: Unprepare succeeds and touches nothing.
    assert (await node.preparer.unprepare([node.ref(uid)]))[uid].error == ""
    assert {p for p in tmp_path.rglob("*")} == before  # nothing written anywhere
    assert node.policy.claims.cpus() == {}
    assert node.claims.gets == 0  # refused before even asking the API server


async def test_a_long_uid_is_quoted_shortened(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    uid = "x" * 100_000
    outcome = (await node.preparer.prepare([node.ref(uid)]))[uid]
    assert "(100000 characters)" in outcome.error
    assert len(outcome.error) < 1000


def test_the_cdi_writer_itself_refuses_a_uid_as_a_file_name(tmp_path: Path) -> None:
    # Defence in depth: even a caller that skipped the check gets no path from a bad UID.
    writer = CdiWriter(tmp_path, DRIVER)
    for uid in ("x/../../escaped", "", UID.upper() + "Z"):
        with pytest.raises(CdiError, match="is not a Kubernetes UID"):
            writer.path(uid)
    assert writer.path(UID) == tmp_path / cdi_name(UID)


async def test_restore_replaces_a_symlink_planted_at_a_claims_cdi_spec(
    tmp_path: Path, victim: Path
) -> None:
    first = make_node(tmp_path)
    assert await prepare(first) == ""
    spec = first.cdi_dir / cdi_name(UID)
    spec.unlink()
    spec.symlink_to(victim)  # the runtime would read the claim's env from someone else's file
    node = first.restart()
    assert spec.is_file() and not spec.is_symlink()
    assert UID in spec.read_text() and victim.read_text() == VICTIM_TEXT
    assert node.policy.claims.claims
