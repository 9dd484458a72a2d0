"""Fixtures shared across test packages."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import settings

from tests.ci_policy import pytest_make_collect_report, pytest_runtest_makereport
from tests.kube.apiserver import ApiServer, session_apiserver, start_apiserver
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


@pytest.fixture(scope="session")
def other_apiservers() -> Iterator[dict[str, ApiServer]]:
    """API servers of versions neither shared one runs, by version (``session_apiserver``
    starts them); shut down at the end of the session."""
    started: dict[str, ApiServer] = {}
    try:
        yield started
    finally:
        for server in started.values():
            server.shutdown()


@pytest.fixture(params=kube_versions())
def kube_version(request: pytest.FixtureRequest) -> str:
    """A Kubernetes version a version-parametrized test runs at: the oldest and newest
    supported, or the one a nox session names (``tests/kube/versions.py``)."""
    version: str = request.param
    return version


@pytest.fixture
def kube_apiserver(request: pytest.FixtureRequest, kube_version: str) -> ApiServer:
    """The session's API server of ``kube_version``: a parametrized test starts none."""
    return session_apiserver(request, kube_version)
