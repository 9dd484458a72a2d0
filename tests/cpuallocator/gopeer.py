"""Builds ``goalloc`` (``goalloc/main.go``): nri-plugins' own ``pkg/cpuallocator`` behind a
line-per-request JSON interface, the reference our allocator is compared with.

It is built in the peer cache, in a main module whose go.mod is the published release's
(``tests.bench.gopeer.release_module``), so it links exactly that release's allocator and
sysfs discovery. Neither imports the nested module ``pkg/topology``, which the release's
go.mod still names: Go needs only its module declaration, so it is pointed at a directory
holding just that (``go.mod`` alone), and the build does not depend on the module proxy
serving ``pkg/topology``'s pseudo-version (it refused it on 2026-12-04). Were a release's
allocator or sysfs to import it, the build would fail there (no Go files), not link
something else. Nothing of it lands in the repository.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from tests.bench.gopeer import TOPOLOGY_MODULE, release_module
from tests.conformance.build import _run_go, cache_dir, go_tool

BINARY = "nri-resmgr-goalloc"
SOURCE = Path(__file__).parent / "goalloc" / "main.go"


def ensure_goalloc() -> Path:
    """The goalloc binary, rebuilt when its source or the generated go.mod changed."""
    go = go_tool()
    workdir = cache_dir() / "build" / "goalloc"
    (workdir / "cmd/goalloc").mkdir(parents=True, exist_ok=True)
    declaration = workdir / "topology-declaration"
    declaration.mkdir(exist_ok=True)
    (declaration / "go.mod").write_text(f"module {TOPOLOGY_MODULE}\n")
    gomod = release_module(go, workdir, "goalloc", str(declaration))
    source = SOURCE.read_text()
    out = cache_dir() / "bin" / BINARY
    stamp = out.with_name(out.name + ".sha256")
    digest = hashlib.sha256((_run_go(go, workdir, "version") + gomod + source).encode())
    if out.exists() and stamp.exists() and stamp.read_text().strip() == digest.hexdigest():
        return out
    (workdir / "cmd/goalloc/main.go").write_text(source)
    out.parent.mkdir(parents=True, exist_ok=True)
    _run_go(go, workdir, "build", "-trimpath", "-o", str(out), "./cmd/goalloc")
    stamp.write_text(digest.hexdigest() + "\n")
    return out


def go_allocate(
    binary: Path,
    sysfs: Path,
    requests: list[dict[str, object]],
    env: Mapping[str, str] | None = None,
) -> tuple[dict[str, str], list[dict[str, str]]]:
    """(discovered priorities, one answer per request) from the Go allocator; ``env`` adds
    environment variables (pkg/sysfs overrides such as ``OVERRIDE_SYS_ATOM_CPUS``)."""
    text = "".join(json.dumps(r) + "\n" for r in requests)
    proc = subprocess.run(
        [str(binary), str(sysfs)],
        input=text,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(env or {})},
    )
    if proc.returncode != 0:
        raise RuntimeError(f"goalloc failed ({proc.returncode}): {proc.stderr[-2000:]}")
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    return lines[0], lines[1:]
