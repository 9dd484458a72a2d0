"""Where the prepared-claims record lives and when it is fsynced (``dra.cpu.state``).

The record only has to outlive the daemon (kubelet prepares the claims again after a
reboot), so on a tmpfs it is written without fsync and anywhere else with one. Which
filesystem a directory is on comes from the mount table; the real one is checked against
coreutils' ``stat -f``, the parsing rules against hand-written tables."""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path

import pytest

from nri_resmgr.cli import parse_options
from nri_resmgr.cpuset import CpuSet
from nri_resmgr.dra import setup
from nri_resmgr.dra.cpu import state
from nri_resmgr.dra.cpu.state import ClaimRecord, ClaimStore, PreparedResult, on_tmpfs
from tests.peers import missing_peer

SHM = Path("/dev/shm")


U1, U2 = "00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002"


def record(uid: str = U1) -> ClaimRecord:
    return ClaimRecord(uid, "ns", "c", CpuSet.parse("6-7"), (PreparedResult("r", "cpu6"),))


def mount_table(tmp_path: Path, *lines: str) -> Path:
    table = tmp_path / "mountinfo"
    table.write_text("".join(line + "\n" for line in lines))
    return table


def test_the_default_state_directory_is_the_tmpfs_under_run() -> None:
    assert setup.STATE_DIR == "/run/nri-resmgr"
    assert parse_options(["--config-file", "x.yaml"], {}).dra_state_dir == "/run/nri-resmgr"


def filesystem_type(path: Path) -> str:
    stat = shutil.which("stat")
    assert stat is not None, "coreutils stat is needed as the independent oracle"
    return subprocess.run(
        [stat, "--file-system", "--format=%T", str(path)], check=True, capture_output=True,
        text=True,
    ).stdout.strip()  # fmt: skip


@pytest.mark.parametrize("where", ["shm", "tmp_path"])
def test_tmpfs_detection_agrees_with_stat_on_the_real_mount_table(
    where: str, tmp_path: Path
) -> None:
    directory = SHM if where == "shm" else tmp_path
    if not directory.is_dir():
        missing_peer(f"{directory} does not exist here")
    expected = filesystem_type(directory) in {"tmpfs", "ramfs"}
    assert on_tmpfs(directory) is expected
    # A directory that does not exist yet is judged by its nearest existing parent.
    assert on_tmpfs(directory / "not" / "yet") is expected


def test_the_longest_mount_point_holding_the_path_decides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, disk, runner = tmp_path / "run", tmp_path / "run" / "disk", tmp_path / "runner"
    for directory in (disk / "state", run / "nri-resmgr", runner):
        directory.mkdir(parents=True)
    table = mount_table(
        tmp_path,
        "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/vda rw",
        f"25 22 0:23 / {run} rw,nosuid shared:5 - tmpfs tmpfs rw,mode=755",
        f"26 25 8:1 /srv {disk} rw - ext4 /dev/vda rw",
    )
    monkeypatch.setattr(state, "MOUNTINFO", table)
    assert on_tmpfs(run / "nri-resmgr")
    assert on_tmpfs(run / "nri-resmgr" / "not-yet")
    assert not on_tmpfs(disk / "state")
    assert not on_tmpfs(runner)  # ".../run" is a string prefix of ".../runner", not a parent
    assert not on_tmpfs(tmp_path)


def test_a_later_mount_on_the_same_point_hides_the_earlier_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = mount_table(
        tmp_path,
        "22 1 8:1 / / rw - ext4 /dev/vda rw",
        f"30 22 8:1 / {tmp_path} rw - ext4 /dev/vda rw",
        f"31 30 0:40 / {tmp_path} rw - tmpfs tmpfs rw",
    )
    monkeypatch.setattr(state, "MOUNTINFO", table)
    assert on_tmpfs(tmp_path / "nri-resmgr")


def test_escaped_mount_points_are_matched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spaced = tmp_path / "a dir"
    spaced.mkdir()
    table = mount_table(
        tmp_path,
        "22 1 8:1 / / rw - ext4 /dev/vda rw",
        f"40 22 0:41 / {str(spaced).replace(' ', chr(92) + '040')} rw - tmpfs tmpfs rw",
    )
    monkeypatch.setattr(state, "MOUNTINFO", table)
    assert on_tmpfs(spaced / "state")
    assert not on_tmpfs(tmp_path)


def test_without_a_mount_table_the_record_counts_as_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(state, "MOUNTINFO", tmp_path / "absent")
    assert not on_tmpfs(SHM)


def count_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = state.os.fsync

    def fsync(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(state.os, "fsync", fsync)
    return calls


@pytest.mark.parametrize("on_memory", [True, False])
def test_the_record_is_fsynced_only_off_tmpfs(
    on_memory: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fstype = "tmpfs" if on_memory else "ext4"
    table = mount_table(
        tmp_path, "22 1 8:1 / / rw - ext4 /dev/vda rw",
        f"50 22 0:50 / {tmp_path / 'state'} rw - {fstype} x rw",
    )  # fmt: skip
    (tmp_path / "state").mkdir()
    monkeypatch.setattr(state, "MOUNTINFO", table)
    fsyncs = count_fsyncs(monkeypatch)
    store = ClaimStore(tmp_path / "state")
    assert store.durable is not on_memory
    store.load()
    store.put(record(U1))
    store.put(record(U2))
    store.remove(U1)
    assert len(fsyncs) == (0 if on_memory else 3)
    # Either way the file is complete and reloads.
    again = ClaimStore(tmp_path / "state")
    again.load()
    assert list(again.records) == [U2]
    assert sorted(p.name for p in (tmp_path / "state").iterdir()) == ["dra-claims.json"]


def test_an_explicit_choice_overrides_the_detection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fsyncs = count_fsyncs(monkeypatch)
    ClaimStore(SHM if SHM.is_dir() else tmp_path, durable=True)  # no write: nothing yet
    store = ClaimStore(tmp_path, durable=True)
    store.put(record())
    assert len(fsyncs) == 1
    ClaimStore(tmp_path, durable=False).put(record(U2))
    assert len(fsyncs) == 1


@pytest.mark.parametrize("on_memory", [True, False])
def test_the_choice_is_said_once_at_load(
    on_memory: bool, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = ClaimStore(tmp_path, durable=not on_memory)
    with caplog.at_level(logging.INFO, logger="nri_resmgr.dra.cpu.state"):
        store.load()
        store.put(record())
    said = [r.getMessage() for r in caplog.records if "DRA claims recorded in" in r.getMessage()]
    assert len(said) == 1
    assert ("not fsynced" in said[0]) is on_memory
