"""The real node for the tests in this directory (marker ``node``): a qemu guest per
topology, booted on first use and kept for the session, one at a time.

Under TCG every step is slow, so a plain run (``nox -s tests``, pytest) runs none of
them; with NRI_RESMGR_NODE_CORE=1 (set by ``.ci/run``) it runs the core set (marker
``node_core``), and ``nox -s node`` (NRI_RESMGR_NODE_ALL=1) runs all of them.
Under CI=true a guest that cannot be built or booted fails the tests (never skips); elsewhere
they skip with the reason. Set NRI_RESMGR_NODE_RECORD=<file> to get, as JSON lines, what the
guest kernel showed at every check.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _pytest.mark import ParameterSet

from tests.kube.gobuild import BuildError
from tests.node.cluster import Cluster, ensure_cluster_binaries
from tests.node.guest import Guest, GuestError
from tests.node.node import Node
from tests.node.session import Nodes, NodeSession
from tests.peers import missing_peer
from tests.policies.balloons import scenario as balloons_scenario
from tests.policies.replay.vm import VmTopology
from tests.policies.topology_aware_e2e import scenario as ta_scenario
from tests.policies.topology_aware_e2e.topologies import N4C16
from tests.runtime.build import PeerUnavailable

RECORD = os.environ.get("NRI_RESMGR_NODE_RECORD")
SUMMARY = pytest.StashKey[list[str]]()
ALL = os.environ.get("NRI_RESMGR_NODE_ALL", "").lower() in ("1", "true", "yes")
# The core set joins the tests session only when asked: .ci/run asks; a developer's plain
# `nox -s tests` or pytest does not boot a guest (docs/development.md, "The real node").
CORE_ON = os.environ.get("NRI_RESMGR_NODE_CORE", "").lower() in ("1", "true", "yes")
CORE = pytest.mark.node_core
N6 = pytest.mark.node_n6
"""Runs on the n6-hbm-cxl guest: these run last, so that each guest boots once."""


def core(replay: Callable[[Path], None]) -> ParameterSet:
    """A replay of the core set, as a parameter."""
    return pytest.param(replay, marks=CORE, id=replay.__name__)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    deselected = []
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.node)
            if not ALL and (not CORE_ON or item.get_closest_marker("node_core") is None):
                deselected.append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [i for i in items if i not in deselected]
    # Stable; the cluster boots a guest of its own, so it comes after every shared guest.
    items.sort(key=lambda i: (i.get_closest_marker("node_cluster") is not None,
                              i.get_closest_marker("node_n6") is not None))  # fmt: skip


@pytest.fixture(scope="session")
def nodes(request: pytest.FixtureRequest) -> Iterator[Nodes]:
    if os.geteuid() != 0:
        missing_peer("the node guest needs root (mmdebstrap, the image build)")
    sessions = Nodes()
    request.session._node_sessions = sessions  # type: ignore[attr-defined]  # for reports
    try:
        yield sessions
    finally:
        sessions.close()
        request.config.stash[SUMMARY] = lines = sessions.summary()
        if RECORD:
            with Path(RECORD).open("a") as f:
                f.writelines(json.dumps({"summary": line}) + "\n" for line in lines)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Each guest's qemu peak RSS and step timings, after the results (a session
    fixture's own output is captured and lost)."""
    lines = config.stash.get(SUMMARY, [])
    if lines:
        terminalreporter.section("real node")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def cluster(nodes: Nodes) -> Iterator[Cluster]:
    """The one-node cluster of ``test_cluster*.py``, in a guest of its own, booted after the
    session's current guest is powered off (two TCG guests would slow both)."""
    nodes.close()  # one guest at a time
    started = time.monotonic()
    try:
        binaries = ensure_cluster_binaries()
    except BuildError as e:
        missing_peer(f"the cluster's Kubernetes binaries cannot be built: {e}")
    built = time.monotonic() - started
    workdir = Path(f"/tmp/nrc-{secrets.token_hex(3)}")
    workdir.mkdir()
    guest: Guest | None = None
    try:
        try:
            guest = Guest.start(N4C16, workdir)
            node = Node.install(guest)
            node.start_containerd()
            node.import_image()
        except (PeerUnavailable, GuestError, TimeoutError) as e:
            missing_peer(f"the cluster guest could not be built or booted: {e}")
        made = Cluster.start(guest, node, binaries, workdir / "pki")
        made.timings = {"binaries": built, "boot to agent": guest.boot_seconds,
                        **{what: sum(t) for what, t in node.timings.items()},
                        **made.timings}  # fmt: skip
        yield made
        print("cluster timings: " + ", ".join(f"{k} {v:.0f}s" for k, v in made.timings.items()))
    finally:
        if guest is not None:
            guest.shutdown()
        shutil.rmtree(workdir, ignore_errors=True)


def boot(nodes: Nodes, topology: VmTopology, name: str) -> NodeSession:
    try:
        return nodes.get(topology, name)
    except (PeerUnavailable, GuestError, TimeoutError) as e:
        missing_peer(f"the {name} guest could not be built or booted: {e}")


@pytest.fixture
def replays(
    nodes: Nodes, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[None]:
    """The replay scenarios' GUEST hook, pointed at the current guest."""

    def hook(kind: str, values: object, machine: object, refused: type[Exception]) -> object:
        assert nodes.current is not None, "boot a guest before replaying on it"
        return nodes.current.replay_runtime(kind, values, machine, refused)  # type: ignore[arg-type]

    monkeypatch.setattr(ta_scenario, "GUEST", hook)
    monkeypatch.setattr(balloons_scenario, "GUEST", hook)
    yield
    if nodes.current is not None:
        nodes.current.report(request.node.name, Path(RECORD) if RECORD else None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[Any]:
    """A failed test's report gets the guest's side: the plugin's and containerd's logs."""
    outcome: Any = yield
    report: pytest.TestReport = outcome.get_result()
    sessions = getattr(item.session, "_node_sessions", None)
    if report.when != "call" or not report.failed or sessions is None:
        return
    current = sessions.current
    if current is None:
        return
    for path in ("/var/log/nri-resmgr.log", "/var/log/containerd.log"):
        try:
            tail = current.guest.run("tail", "-n", "60", path, timeout=60, check=False).out
        except (GuestError, TimeoutError, OSError) as e:
            tail = f"(could not read it: {e})"
        report.sections.append((f"guest {path}", tail))
