"""Fixtures shared across test packages."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests.ci_policy import pytest_make_collect_report, pytest_runtest_makereport
from tests.kube.apiserver import ApiServer, start_apiserver
from tests.kube.gobuild import KUBERNETES_VERSION
from tests.kube.versions import kube_versions
from tests.peers import in_ci

__all__ = ["pytest_make_collect_report", "pytest_runtest_makereport"]  # hooks: CI never skips

# No per-example deadline: hypothesis' default (200 ms) turns a slow moment on a shared
# 2-core CI machine into a failure. Speed is measured in benchmarks, never asserted here.
# Under CI the examples are derandomized, so a run is reproducible and a red CI is a real
# regression; exploration with fresh seeds is `nox -s statemachine` and local runs.
settings.register_profile("nri-resmgr", deadline=None, print_blob=True, derandomize=in_ci())
settings.load_profile("nri-resmgr")


@pytest.fixture(scope="session")
def apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """A real etcd + kube-apiserver on loopback, built on first use; shared by the session.

    Defined here, not in tests/kube, so every package that needs it (kube client, config
    agent, DRA) gets the same instance: a fixture imported into a second conftest would
    start a second server.
    """
    server = start_apiserver(tmp_path_factory.mktemp("apiserver"))
    try:
        yield server
    finally:
        server.shutdown()


@pytest.fixture(scope="session")
def apiserver_137(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """A second real API server, v1.37.2, for what changed there (it compresses a watch-list's
    reply, one gzip member per flush); shared by the session like ``apiserver``."""
    server = start_apiserver(tmp_path_factory.mktemp("apiserver-v1.37.2"), "v1.37.2")
    try:
        yield server
    finally:
        server.shutdown()


SHARED_APISERVERS = {KUBERNETES_VERSION: "apiserver", "v1.37.2": "apiserver_137"}
"""The session's API servers by version: the fixture that starts each."""


@pytest.fixture(scope="session")
def other_apiservers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ApiServer]]:
    """API servers of versions neither shared one runs (only a nox session asks for one,
    ``tests/kube/versions.py``), one per version, started on first use, shared by the session."""
    started: dict[str, ApiServer] = {}
    try:
        yield started
    finally:
        for server in started.values():
            server.shutdown()


@pytest.fixture(params=kube_versions())
def kube_version(request: pytest.FixtureRequest) -> str:
    """A Kubernetes version a version-parametrized test runs at: the oldest and newest
    supported, or the one a nox session names."""
    version: str = request.param
    return version


@pytest.fixture
def kube_apiserver(
    request: pytest.FixtureRequest,
    kube_version: str,
    other_apiservers: dict[str, ApiServer],
    tmp_path_factory: pytest.TempPathFactory,
) -> ApiServer:
    """The session's API server of ``kube_version``: one of the two shared ones above, so a
    parametrized test starts no server of its own."""
    if kube_version in SHARED_APISERVERS:
        server: ApiServer = request.getfixturevalue(SHARED_APISERVERS[kube_version])
        return server
    if kube_version not in other_apiservers:
        workdir: Path = tmp_path_factory.mktemp(f"apiserver-{kube_version}")
        other_apiservers[kube_version] = start_apiserver(workdir, kube_version)
    return other_apiservers[kube_version]
