"""The real node's guest boot (``tests/node/guest.py``) without a guest: a kernel whose console
stays empty is given up on after ``SILENT_BOOT`` seconds, and booted once more; a kernel whose
console reports a CPU stuck for ``HUNG_KERNEL`` seconds is given up on at once, and the node
session made on another guest."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.node import guest as guest_module
from tests.node import session as session_module
from tests.node.guest import Guest, HungKernel, SilentKernel


def silent_guest(workdir: Path, console: str) -> Guest:
    """A guest whose qemu runs (a sleep) and whose agent never answers."""
    (workdir / "console.log").write_text(console)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    ours, _theirs = socket.socketpair()
    g = Guest(workdir, proc, ours)

    def no_answer(req: Any, timeout: float = 0) -> dict[str, Any]:
        raise TimeoutError("no answer")

    g.request = no_answer  # type: ignore[method-assign]
    return g


def test_an_empty_console_past_the_limit_is_a_silent_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(guest_module, "SILENT_BOOT", -1.0)
    g = silent_guest(tmp_path, "")
    try:
        with pytest.raises(SilentKernel, match="printed nothing"):
            g._wait_agent(started=time.monotonic())
    finally:
        g.proc.kill()
        g.proc.wait()


def test_a_console_with_output_waits_for_the_boot_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(guest_module, "SILENT_BOOT", -1.0)
    monkeypatch.setattr(guest_module, "BOOT_TIMEOUT", -1.0)
    g = silent_guest(tmp_path, "Loading, please wait...\n")
    try:
        with pytest.raises(guest_module.GuestError) as raised:
            g._wait_agent(started=time.monotonic())
        assert not isinstance(raised.value, SilentKernel)
        assert "did not answer" in str(raised.value)
    finally:
        g.proc.kill()
        g.proc.wait()


def test_a_silent_kernel_is_booted_once_more_and_then_given_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(guest_module, "ensure_packages", lambda packages: None)
    attempts: list[int] = []
    booted = object()

    def boot_once(*args: Any) -> object:
        attempts.append(len(attempts) + 1)
        if len(attempts) < 2:
            raise SilentKernel("the guest's kernel printed nothing in 300s")
        return booted

    monkeypatch.setattr(Guest, "_boot_once", classmethod(lambda cls, *a: boot_once(*a)))
    image: Any = object()
    assert Guest.start(Any, tmp_path, image) is booted  # type: ignore[arg-type]
    assert attempts == [1, 2]

    attempts.clear()

    def always_silent(*args: Any) -> object:
        attempts.append(1)
        raise SilentKernel("silent")

    monkeypatch.setattr(Guest, "_boot_once", classmethod(lambda cls, *a: always_silent()))
    with pytest.raises(SilentKernel):
        Guest.start(Any, tmp_path, image)  # type: ignore[arg-type]
    assert attempts == [1, 1]


LOCKUP = "[  77.230407] watchdog: BUG: soft lockup - CPU#1 stuck for {}s! [runc:592]\n"


def test_a_short_soft_lockup_is_load_and_a_long_one_a_hung_kernel(tmp_path: Path) -> None:
    g = silent_guest(tmp_path, LOCKUP.format(26))
    try:
        g.check_kernel("cri")  # a CPU late by 26 s under TCG: slow, not hung
        assert not g.hung
        with (tmp_path / "console.log").open("a") as console:
            console.write(LOCKUP.format(626))
        with pytest.raises(HungKernel, match="stuck for 626s"):
            g.check_kernel("cri")
        assert g.hung
        with pytest.raises(HungKernel, match="locked up"):
            g.request_many([{"op": "ping"}], timeout=5)  # nothing more is asked of it
    finally:
        g.proc.kill()
        g.proc.wait()


def test_a_node_whose_guest_hangs_while_it_is_made_is_made_on_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    workdirs: list[Path] = []
    made = object()

    def node_session(topology: Any, name: str, workdir: Path) -> object:
        workdirs.append(workdir)
        if len(workdirs) == 1:
            raise HungKernel("the guest's kernel reports a CPU stuck for 626s")
        return made

    monkeypatch.setattr(session_module, "NodeSession", node_session)
    try:
        assert session_module.Nodes._start(Any, "n4c16") is made  # type: ignore[arg-type]
        assert len(workdirs) == 2 and not workdirs[0].exists()
    finally:
        for w in workdirs:
            if w.exists():
                w.rmdir()
