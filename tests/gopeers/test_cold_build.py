"""Every Go peer and contender builds on a fresh machine: each builder runs against an empty
cache (``NRI_RESMGR_CACHE``, ``GOMODCACHE``, ``GOCACHE`` all fresh), so every module it
needs must come from the module proxy, as on a CI machine that never built it. (The bench's
topology-aware contender once built only here, from a module cache that still held what
the proxy no longer serves.)"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

from tests.bench.gopeer import ensure_go_topology_aware
from tests.conformance.build import ensure_all
from tests.cpuallocator.gopeer import ensure_goalloc
from tests.dra.kubeletbuild import ensure_peer
from tests.dra.schedulerbuild import ensure_scheduler
from tests.helm.helmbuild import ensure_helm
from tests.kube.gobuild import ensure_binaries
from tests.kube.nrtschedbuild import ensure_nrt_scheduler
from tests.node.payload import CONTAINERD_VERSION
from tests.runtime.build import ensure_containerd, ensure_legacy_containerd

BUILDERS: dict[str, Callable[[], object]] = {
    "nri-plugins-topology-aware (bench contender, node migration)": ensure_go_topology_aware,
    "goalloc (allocator parity)": ensure_goalloc,
    "nri harnesses v0.12, v0.6 and the Go reference plugin": ensure_all,
    "kube-apiserver and etcd": ensure_binaries,
    "helm": ensure_helm,
    "kubelet plugin and DRA managers": ensure_peer,
    "kubelet plugin and DRA managers at v1.37.2 (kubelet's newer API)": partial(
        ensure_peer, "v1.37.2"
    ),
    "kube-scheduler": ensure_scheduler,
    "kube-scheduler with scheduler-plugins' NodeResourceTopologyMatch": ensure_nrt_scheduler,
    "containerd v2.2.9 and crictl (host suite)": ensure_containerd,
    "containerd v1.7 (NRI v0.6)": ensure_legacy_containerd,
    f"containerd {CONTAINERD_VERSION} and crictl (node guest)": partial(
        ensure_containerd, CONTAINERD_VERSION
    ),
}


def _files(result: object) -> list[Path]:
    if isinstance(result, Path):
        return [result] if result.is_file() else sorted(result.iterdir())
    if isinstance(result, dict):
        return [p for v in result.values() for p in _files(v)]
    if isinstance(result, tuple):
        return [p for v in result for p in _files(v)]
    raise TypeError(f"a builder returned {result!r}")


@pytest.mark.parametrize("name", BUILDERS)
def test_builds_from_an_empty_cache(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("NRI_RESMGR_CACHE", str(cache))
    monkeypatch.setenv("GOMODCACHE", str(cache / "go" / "mod"))
    monkeypatch.setenv("GOCACHE", str(cache / "go" / "build"))
    started = time.monotonic()
    built = _files(BUILDERS[name]())
    assert built and all(p.is_file() and os.access(p, os.X_OK) for p in built), built
    assert all(cache in p.parents for p in built), built
    print(f"\n{name}: {len(built)} binaries in {time.monotonic() - started:.0f}s")
