"""Builds the Go nri-plugins topology-aware plugin, the contender our daemon is compared with.

It comes from its published module, github.com/containers/nri-plugins, into the peer cache
(``${NRI_RESMGR_CACHE:-~/.cache/nri-resmgr}/bin/nri-plugins-topology-aware``). ``go install``
cannot build it: its go.mod replaces the nested module ``pkg/topology`` with a relative
directory, which Go ignores outside the main module. So we build from a throwaway main module
in the cache whose go.mod is the upstream one with that replace pointed somewhere real:

1. the nested module at the release commit, as a pseudo-version from the module proxy;
2. failing that (a proxy that serves only tagged releases, or refuses that pseudo-version,
   as this workplace's did on 2026-12-04), a local copy of ``pkg/topology`` from the same
   commit in ``$NRI_PLUGINS_TOPOLOGY_SRC`` or ``<cache>/src/nri-plugins-topology@<commit>``
   (``git archive <commit> pkg/topology``).

``release_module`` writes that main module's go.mod and go.sum for any target; goalloc
(``tests/cpuallocator/gopeer.py``) uses it with a target of its own. Nothing of it lands in
the repository.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from pathlib import Path

from tests.conformance.build import BuildError, _run_go, cache_dir, go_tool

MODULE = "github.com/containers/nri-plugins"
VERSION = "v0.10.1"
RELEASE_COMMIT = "799d8f2f4ecb"
TOPOLOGY_MODULE = f"{MODULE}/pkg/topology"
TOPOLOGY_PSEUDO = f"v0.0.0-20250819055650-{RELEASE_COMMIT}"
PACKAGE = f"{MODULE}/cmd/plugins/topology-aware"
BINARY = "nri-plugins-topology-aware"


def binary_path() -> Path:
    return cache_dir() / "bin" / BINARY


def ensure_go_topology_aware() -> Path:
    """The plugin binary, built when missing or when its generated go.mod changed."""
    out = binary_path()
    try:
        go = go_tool()
    except BuildError:
        if out.exists():
            return out
        raise
    workdir = cache_dir() / "build" / BINARY
    workdir.mkdir(parents=True, exist_ok=True)
    gomod = release_module(go, workdir, "bench-peers", _topology_replacement(go, workdir))
    stamp = out.with_name(out.name + ".sha256")
    digest = hashlib.sha256((_run_go(go, workdir, "version") + gomod).encode()).hexdigest()
    if out.exists() and stamp.exists() and stamp.read_text().strip() == digest:
        return out
    _build(go, workdir, out)
    stamp.write_text(digest + "\n")
    return out


def release_module(go: str, workdir: Path, name: str, topology_target: str) -> str:
    """Write into ``workdir`` a main module ``nri-resmgr.local/<name>`` that requires the
    release, with upstream's go.sum and ``pkg/topology`` replaced by ``topology_target``;
    returns the go.mod text."""
    workdir.mkdir(parents=True, exist_ok=True)
    upstream = _download(go, workdir, f"{MODULE}@{VERSION}")
    gomod = _main_module(Path(upstream["GoMod"]).read_text(), name, topology_target)
    (workdir / "go.mod").write_text(gomod)
    (workdir / "go.sum").write_bytes((Path(upstream["Dir"]) / "go.sum").read_bytes())
    return gomod


def _download(go: str, workdir: Path, spec: str) -> dict[str, str]:
    info: dict[str, str] = json.loads(_run_go(go, workdir, "mod", "download", "-json", spec))
    return info


def _topology_replacement(go: str, workdir: Path) -> str:
    try:
        _download(go, workdir, f"{TOPOLOGY_MODULE}@{TOPOLOGY_PSEUDO}")
        return f"{TOPOLOGY_MODULE} {TOPOLOGY_PSEUDO}"
    except BuildError as exc:
        local = _local_topology_source()
        if local is None:
            raise BuildError(
                f"{TOPOLOGY_MODULE} at commit {RELEASE_COMMIT} is not on the module proxy "
                f"({exc}); put `git archive {RELEASE_COMMIT} pkg/topology` of {MODULE} into "
                f"$NRI_PLUGINS_TOPOLOGY_SRC or {_default_local_source()}"
            ) from exc
        return str(local)


def _default_local_source() -> Path:
    return cache_dir() / "src" / f"nri-plugins-topology@{RELEASE_COMMIT[:8]}"


def _local_topology_source() -> Path | None:
    configured = os.environ.get("NRI_PLUGINS_TOPOLOGY_SRC")
    for candidate in (Path(configured) if configured else None, _default_local_source()):
        if candidate is not None and (candidate / "go.mod").exists():
            return candidate
    return None


def _main_module(upstream_gomod: str, name: str, topology_target: str) -> str:
    """The upstream go.mod as a main module of our own that requires the release."""
    text = re.sub(r"(?m)^module .*$", f"module nri-resmgr.local/{name}", upstream_gomod)
    text = re.sub(r"(?m)^tool .*\n", "", text)  # tool deps are upstream's, not needed here
    text = text.replace("require (", f"require (\n\t{MODULE} {VERSION}", 1)
    relative = re.compile(rf"(?m)^(\s*{re.escape(TOPOLOGY_MODULE)} v0\.0\.0 =>) \./pkg/topology$")
    if not relative.search(text):
        raise BuildError(f"{MODULE}@{VERSION}: its go.mod no longer replaces pkg/topology")
    return relative.sub(lambda m: f"{m.group(1)} {topology_target}", text)


def _build(go: str, workdir: Path, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    started = time.monotonic()
    print(f"building {PACKAGE}@{VERSION} (a cold build takes minutes)...", file=sys.stderr)
    _run_go(go, workdir, "build", "-trimpath", "-o", str(tmp), PACKAGE)
    tmp.replace(out)
    print(f"built {out} in {time.monotonic() - started:.0f}s", file=sys.stderr)


if __name__ == "__main__":
    print(ensure_go_topology_aware())
