"""``simulate``'s inputs are bounded (issue 34 item 6): a few hundred bytes of YAML aliases
ran past 60 s with memory growing, deep nesting ended in a RecursionError traceback, and a
0.5 MB snapshot archive unpacked to 512 MiB. Each is now a clear error, exit status 2."""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from nri_resmgr.errors import ConfigError
from nri_resmgr.sim import snapshot
from nri_resmgr.sim.bounds import MAX_DEPTH, MAX_VALUES, check_yaml
from nri_resmgr.sim.snapshot import SnapshotError, extract_snapshot
from tests.simulate.helpers import REPO, TOPOLOGY_AWARE, WORKLOAD

GUARD = 60  # seconds: a hang guard (the bomb used to run past it), not a timing assertion


def aliases(levels: int = 8, indent: str = "  ") -> str:
    """Nine-fold nested aliases: level ``levels`` stands for 9**levels values."""
    lines = [f'{indent}x0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"{indent}x{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return "\n".join(lines)


# The pod's labels hold the anchors; the bad CPU limit quotes the expanded alias in its error.
BOMB_WORKLOAD = f"""\
apiVersion: v1
kind: Pod
metadata:
  name: p
  labels:
{aliases()}
spec:
  containers:
  - name: c
    image: i
    resources: {{limits: {{cpu: *a8}}}}
"""
DEEP_WORKLOAD = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: " + "[" * 3000 + "]" * 3000
BOMB_CONFIG = TOPOLOGY_AWARE.read_text() + f"  control:\n    rdt:\n{aliases(indent=' ' * 6)}\n"
DEEP_CONFIG = TOPOLOGY_AWARE.read_text() + "  control: {rdt: " + "[" * 3000 + "]" * 3000 + "}\n"


def simulate(tmp_path: Path, *, config: str | None = None, workload: str | None = None,
             machine: str = "n4c16") -> subprocess.CompletedProcess[str]:  # fmt: skip
    cfg, pods = TOPOLOGY_AWARE, WORKLOAD
    if config is not None:
        cfg = tmp_path / "config.yaml"
        cfg.write_text(config)
    if workload is not None:
        pods = tmp_path / "pods.yaml"
        pods.write_text(workload)
    return subprocess.run(
        [sys.executable, "-m", "nri_resmgr", "simulate", "--config", str(cfg), "--workload",
         str(pods), "--machine", machine],
        capture_output=True, text=True, cwd=REPO, timeout=GUARD, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip


@pytest.mark.parametrize(
    ("which", "text", "problem"),
    [
        ("workload", BOMB_WORKLOAD, f"more than {MAX_VALUES} values once aliases are expanded"),
        ("workload", DEEP_WORKLOAD, f"nested deeper than {MAX_DEPTH} levels at line 4"),
        ("config", BOMB_CONFIG, f"more than {MAX_VALUES} values once aliases are expanded"),
        ("config", DEEP_CONFIG, f"nested deeper than {MAX_DEPTH} levels"),
    ],
    ids=["workload-alias-bomb", "workload-deep", "config-alias-bomb", "config-deep"],
)
def test_yaml_beyond_the_bounds_is_a_one_line_error_and_exit_2(
    tmp_path: Path, which: str, text: str, problem: str
) -> None:
    assert len(text.encode()) < 10_000  # small inputs, as the review's
    proc = simulate(tmp_path, **{which: text})
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert problem in proc.stderr
    assert "Traceback" not in proc.stderr and "RecursionError" not in proc.stderr


def test_aliases_within_the_bounds_are_fine() -> None:
    check_yaml(f"a:\n{aliases(levels=5)}\n", "under a million")  # 9**6 + 9**5 + ... values
    check_yaml("[" * MAX_DEPTH + "]" * MAX_DEPTH, "deep enough")
    with pytest.raises(ConfigError, match="nested deeper"):
        check_yaml("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "too deep")


def test_the_repository_workloads_are_within_the_bounds() -> None:
    for path in (REPO / "tests" / "simulate" / "data").glob("*.yaml"):
        check_yaml(path.read_text(), str(path))


# -- snapshot archives -----------------------------------------------------------------------


class Zeros(io.RawIOBase):
    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        n = min(len(buffer), self.left)
        buffer[:n] = bytes(n)
        self.left -= n
        return n


def archive(path: Path, members: dict[str, int]) -> Path:
    """A gzipped tar of ``name: size`` zero-filled files (streamed: no size in memory)."""
    with gzip.open(path, "wb", compresslevel=1) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        for name, size in members.items():
            info = tarfile.TarInfo(name)
            info.size = size
            tar.addfile(info, io.BufferedReader(Zeros(size)))
    return path


CPU = "sys/devices/system/cpu"


def test_a_small_archive_that_unpacks_to_hundreds_of_mib_is_refused_at_its_header(
    tmp_path: Path,
) -> None:
    bomb = archive(tmp_path / "bomb.tar.gz", {f"{CPU}/online": 4, f"{CPU}/big": 128 << 20})
    assert bomb.stat().st_size < 1 << 20
    with pytest.raises(SnapshotError, match=r"member 'sys/devices/system/cpu/big' is 134217728"):
        extract_snapshot(bomb, tmp_path / "root")
    unpacked = sum(p.stat().st_size for p in (tmp_path / "root").rglob("*") if p.is_file())
    assert unpacked < 1 << 20
    proc = simulate(tmp_path, machine=str(bomb))
    assert proc.returncode == 2 and "is 134217728 bytes" in proc.stderr


def test_the_member_count_and_total_size_are_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(snapshot, "MAX_MEMBERS", 10)
    many = archive(tmp_path / "many.tar.gz", {f"{CPU}/f{i}": 1 for i in range(11)})
    with pytest.raises(SnapshotError, match="more than 10 members"):
        extract_snapshot(many, tmp_path / "a")
    monkeypatch.setattr(snapshot, "MAX_TOTAL_BYTES", 100_000)
    sized = archive(tmp_path / "sized.tar.gz", {f"{CPU}/f{i}": 60_000 for i in range(2)})
    with pytest.raises(SnapshotError, match="larger than 100000 bytes in all"):
        extract_snapshot(sized, tmp_path / "b")


def test_a_huge_name_header_is_refused_before_it_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "longname.tar.gz"
    with (
        gzip.open(path, "wb", compresslevel=1) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar,
    ):
        info = tarfile.TarInfo(f"{CPU}/" + "n" * (2 << 20))
        info.size = 0
        tar.addfile(info)
    with pytest.raises(SnapshotError, match="a tar header of over"):
        extract_snapshot(path, tmp_path / "root")
