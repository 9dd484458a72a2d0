"""Builds the Go peers of the NRI conformance tests into the peer cache, outside the repo.

Three binaries come from the sources beside this file, each built from published Go modules:

- ``nri-harness-v0.12``: the runtime side at the latest NRI release (dedicated event RPCs);
- ``nri-harness-v0.6``: the same source pinned to NRI v0.6.1 through ``go.v06.mod``,
  emulating containerd 1.7 (events delivered as StateChange);
- ``nri-goplugin``: a reference plugin on the Go stub, used to prove the harness itself.

A binary is rebuilt only when its inputs (sources, module files, tags, Go version) hash
differently from the ``.sha256`` file stored beside it. Run ``python -m tests.conformance.build``
to build them all (the nox ``conformance`` session does) or call ``ensure_binary``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import attrs

HERE = Path(__file__).resolve().parent


class BuildError(RuntimeError):
    """A Go peer could not be built; the message names the step and carries Go's output."""


@attrs.frozen
class GoTarget:
    """One binary: its source dir, build tags and, for pinned builds, an alternative go.mod."""

    name: str
    source: Path
    tags: tuple[str, ...]
    modfile: str | None = None

    def build_args(self) -> list[str]:
        args = ["build", "-trimpath", "-tags", ",".join(self.tags)]
        if self.modfile:
            args.append(f"-modfile={self.modfile}")
        return args

    def input_files(self) -> list[Path]:
        return sorted(p for p in self.source.iterdir() if p.suffix in {".go", ".mod", ".sum"})


HARNESS_V012 = GoTarget("nri-harness-v0.12", HERE / "harness", ("nri_no_wasm",))
HARNESS_V06 = GoTarget("nri-harness-v0.6", HERE / "harness", ("nri_v06",), "go.v06.mod")
GOPLUGIN = GoTarget("nri-goplugin", HERE / "goplugin", ("nri_no_wasm",))
TARGETS = {t.name: t for t in (HARNESS_V012, HARNESS_V06, GOPLUGIN)}
HARNESSES = {"v0.12": HARNESS_V012, "v0.6": HARNESS_V06}


def cache_dir() -> Path:
    default = Path.home() / ".cache" / "nri-resmgr"
    return Path(os.environ.get("NRI_RESMGR_CACHE") or default)


def binary_path(target: GoTarget) -> Path:
    return cache_dir() / "bin" / target.name


def go_tool() -> str:
    found = os.environ.get("GO") or shutil.which("go") or "/usr/local/go/bin/go"
    if not Path(found).exists() and shutil.which(found) is None:
        raise BuildError(f"the Go toolchain was not found (looked for {found}); set GO=/path/to/go")
    return found


def ensure_binary(target: GoTarget) -> Path:
    """The target's binary, rebuilt when missing or when its inputs changed."""
    out = binary_path(target)
    stamp = out.with_name(out.name + ".sha256")
    try:
        go = go_tool()
    except BuildError:
        if out.exists():  # a cached binary is still usable without a toolchain
            return out
        raise
    digest = input_hash(target, go)
    if out.exists() and stamp.exists() and stamp.read_text().strip() == digest:
        return out
    _build(target, go, out)
    stamp.write_text(digest + "\n")
    return out


def ensure_all() -> dict[str, Path]:
    return {name: ensure_binary(t) for name, t in TARGETS.items()}


def input_hash(target: GoTarget, go: str) -> str:
    h = hashlib.sha256()
    h.update(_run_go(go, target.source, "version").encode())
    h.update(" ".join(target.build_args()).encode())
    for path in target.input_files():
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def go_env() -> dict[str, str]:
    cache = cache_dir() / "go"
    return os.environ | {
        "GOMODCACHE": str(cache / "mod"),
        "GOCACHE": str(cache / "build"),
        "GOFLAGS": "-mod=mod",
        "GOTOOLCHAIN": "local",
        "CGO_ENABLED": "0",
    }


def _build(target: GoTarget, go: str, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    started = time.monotonic()
    _run_go(go, target.source, *target.build_args(), "-o", str(tmp), ".")
    tmp.replace(out)  # atomic: a half-written binary never looks cached
    print(f"built {out} in {time.monotonic() - started:.0f}s", file=sys.stderr)


def _run_go(go: str, cwd: Path, *args: str) -> str:
    # nice: the machine is shared, and a cold build compiles every dependency
    cmd = ["nice", "-n", "10", go, *args] if shutil.which("nice") else [go, *args]
    proc = subprocess.run(cmd, cwd=cwd, env=go_env(), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BuildError(f"`go {' '.join(args)}` in {cwd} failed:\n{proc.stderr.strip()}")
    return proc.stdout


def main() -> None:
    for name, path in ensure_all().items():
        print(f"{name}: {path}")


if __name__ == "__main__":
    main()
