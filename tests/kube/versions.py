"""Which Kubernetes versions a version-parametrized real-peer test runs at.

The default suite (``nox -s tests``, ``.ci/run``) runs those tests at the oldest and the
newest version this project supports (``OLDEST``, ``NEWEST``); a nox session names one other
version the suite knows through ``VERSIONS_ENV`` (``nox -s scheduler``: v1.36.3), and every
such test runs there alone. The versions are the ones ``tests/kube/gobuild.py`` builds.
"""

from __future__ import annotations

import os

from tests.kube.gobuild import KUBERNETES_VERSIONS

OLDEST = KUBERNETES_VERSIONS[0]
NEWEST = KUBERNETES_VERSIONS[-1]
VERSIONS_ENV = "NRI_RESMGR_KUBE_VERSION"
"""Set (e.g. ``v1.36.3``, by ``nox -s scheduler``), the one Kubernetes version the
version-parametrized real-peer tests run at instead of their defaults."""

__all__ = ["NEWEST", "OLDEST", "VERSIONS_ENV", "kube_versions", "minor"]


def kube_versions(*defaults: str) -> tuple[str, ...]:
    """``defaults`` (the oldest and newest supported when none are given), or the one
    version ``VERSIONS_ENV`` names; a version the suite does not build is an error."""
    wanted = os.environ.get(VERSIONS_ENV, "").strip()
    if not wanted:
        return defaults or (OLDEST, NEWEST)
    if wanted not in KUBERNETES_VERSIONS:
        raise ValueError(f"{VERSIONS_ENV}={wanted}: not one of {', '.join(KUBERNETES_VERSIONS)}")
    return (wanted,)


def minor(version: str) -> tuple[int, int]:
    """``v1.36.3`` -> ``(1, 36)``, for "from this release on" checks."""
    major, minor_, *_ = version.removeprefix("v").split(".")
    return int(major), int(minor_)
