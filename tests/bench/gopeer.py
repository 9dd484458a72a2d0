"""Builds the Go nri-plugins topology-aware plugin, the contender our daemon is compared with.

It comes from its published module, github.com/containers/nri-plugins, into the peer cache
(``${NRI_RESMGR_CACHE:-~/.cache/nri-resmgr}/bin/nri-plugins-topology-aware``). ``go install``
cannot build it: its go.mod replaces the nested module ``pkg/topology`` with a relative
directory, which Go ignores outside the main module. So we build from a throwaway main module
in the cache whose go.mod is the upstream one with that replace pointed somewhere real.

Unlike the allocator (``tests/cpuallocator/gopeer.py``, which does not import it and points
the replace at a bare module declaration), the plugin imports ``pkg/topology``: device and
mount topology hints. That module is published nowhere: it is never tagged, no release's
module zip holds it (a nested module is cut out), and the module proxy refuses its
pseudo-versions (checked 2026-12-07 for the v0.10.0, v0.10.1 and v0.14.0 release commits).
So the replace points at ``gotopology/`` beside this file: a stand-in written for this
project with the same API and the behaviour upstream documents (hints from the sysfs files
of a device and its parents), copied into the cache and hashed into the build stamp. It is
the one part of the contender that is not upstream's; the workloads compared here have no
device whose hints it would give.

``release_module`` writes that main module's go.mod and go.sum for any target; goalloc uses
it with a target of its own. Nothing built lands in the repository.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

from tests.conformance.build import BuildError, _run_go, cache_dir, go_tool

MODULE = "github.com/containers/nri-plugins"
VERSION = "v0.10.1"
TOPOLOGY_MODULE = f"{MODULE}/pkg/topology"
TOPOLOGY_STANDIN = Path(__file__).parent / "gotopology"
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
    gomod = release_module(go, workdir, "bench-peers", _topology_replacement(workdir))
    stamp = out.with_name(out.name + ".sha256")
    inputs = _run_go(go, workdir, "version") + gomod + _standin_text()
    digest = hashlib.sha256(inputs.encode()).hexdigest()
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


def _topology_replacement(workdir: Path) -> str:
    """The stand-in for ``pkg/topology``, copied into the build directory."""
    target = workdir / "topology-standin"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(TOPOLOGY_STANDIN, target)
    return str(target)


def _standin_text() -> str:
    return "".join(p.read_text() for p in sorted(TOPOLOGY_STANDIN.iterdir()) if p.is_file())


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
