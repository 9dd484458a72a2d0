"""Topology snapshots: taken here, they simulate exactly as this host does."""

from __future__ import annotations

import fnmatch
import io
import json
import tarfile
from pathlib import Path

import pytest

from nri_resmgr.sim.snapshot import (
    MANIFEST,
    PATTERNS,
    SnapshotError,
    extract_snapshot,
    take_snapshot,
)
from nri_resmgr.sim.synthetic import TOPOLOGIES, write_sysfs
from nri_resmgr.sysfs import discover
from tests.simulate.helpers import TOPOLOGY_AWARE, WORKLOAD, run_cli


def test_a_snapshot_of_this_host_simulates_the_same_as_host(tmp_path: Path) -> None:
    snapshot = tmp_path / "node.tar.gz"
    proc = run_cli("snapshot-topology", "-o", str(snapshot), expect=0)
    assert proc.stdout == ""
    args = ["simulate", "--config", str(TOPOLOGY_AWARE), "--workload", str(WORKLOAD)]
    args += ["--output", "json"]
    # This host may be too small for the whole workload: then both runs fail alike.
    host_run = run_cli(*args, "--machine", "host")
    snap_run = run_cli(*args, "--machine", str(snapshot))
    assert host_run.returncode == snap_run.returncode, (host_run.stderr, snap_run.stderr)
    host, snap = json.loads(host_run.stdout), json.loads(snap_run.stdout)
    assert snap["machine"]["kind"] == "snapshot" and host["machine"]["kind"] == "host"
    for key in ("cpus", "isolated", "reserved", "available", "nodes", "topology"):
        assert snap["machine"][key] == host["machine"][key], key
    assert snap["containers"] == host["containers"]
    assert snap["steps"] == host["steps"]
    assert snap["cpu_users"] == host["cpu_users"]
    assert any(c["status"] == "running" for c in host["containers"])


def test_the_snapshot_discovers_as_the_host_and_holds_only_topology_files(tmp_path: Path) -> None:
    data = take_snapshot()
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        names = tar.getnames()
    for name in names:
        assert name == MANIFEST or any(fnmatch.fnmatch(name, p) for p in PATTERNS), name
    assert not any(n.startswith(("sys/fs", "proc/self", "sys/class")) for n in names)
    manifest = extract_snapshot(_write(tmp_path / "s.tar.gz", data), tmp_path / "root")
    assert manifest["files"] == len(names) - 1
    assert discover(str(tmp_path / "root")) == discover("")
    # Deterministic: the same node gives the same bytes.
    assert take_snapshot() == data


def test_a_synthetic_tree_round_trips_through_a_snapshot(tmp_path: Path) -> None:
    root = write_sysfs(tmp_path / "synthetic", TOPOLOGIES["n4c16-isolated"])
    archive = _write(tmp_path / "s.tar.gz", take_snapshot(str(root)))
    extract_snapshot(archive, tmp_path / "back")
    restored = discover(str(tmp_path / "back"))
    assert restored == discover(str(root))
    assert str(restored.isolated) == "14-15"


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _tar(path: Path, members: dict[str, bytes], symlink: str | None = None) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
        if symlink:
            info = tarfile.TarInfo(symlink)
            info.type = tarfile.SYMTYPE
            info.linkname = "/etc/passwd"
            tar.addfile(info)
    return path


@pytest.mark.parametrize(
    ("members", "symlink", "message"),
    [
        ({"../evil": b"x"}, None, "points outside the snapshot"),
        ({"etc/passwd": b"x"}, None, "is not a sysfs/procfs file"),
        ({"sys/devices/system/cpu/online": b"0\n"}, "sys/link", "is not a plain file"),
        ({"proc/meminfo": b"MemTotal: 1 kB\n"}, None, "not a topology snapshot"),
    ],
)
def test_an_archive_that_is_not_a_clean_snapshot_is_refused(
    tmp_path: Path, members: dict[str, bytes], symlink: str | None, message: str
) -> None:
    archive = _tar(tmp_path / "bad.tar.gz", members, symlink)
    with pytest.raises(SnapshotError, match=message):
        extract_snapshot(archive, tmp_path / "out")


def test_simulate_names_a_file_that_is_no_archive(tmp_path: Path) -> None:
    junk = tmp_path / "junk.tar.gz"
    junk.write_text("not gzip")
    proc = run_cli("simulate", "--config", str(TOPOLOGY_AWARE), "--workload", str(WORKLOAD),
                   "--machine", str(junk), expect=2)  # fmt: skip
    assert "cannot read the topology snapshot" in proc.stderr


def test_the_snapshot_manifest_names_the_node() -> None:
    with tarfile.open(fileobj=io.BytesIO(take_snapshot())) as tar:
        member = tar.extractfile(MANIFEST)
        assert member is not None
        manifest = json.loads(member.read())
    assert manifest["hostname"] and manifest["files"] > 0
