"""Builds ``nrt-scheduler`` (``tests/kube/nrtscheduler/main.go``): kube-scheduler with
scheduler-plugins' NodeResourceTopologyMatch plugin, both from their published modules.

The wrapper-module approach of ``tests/kube/gobuild.py`` and its Go caches (the kube-scheduler
packages compile once for this and ``tests/dra/schedulerbuild.py``): a throwaway main module
requires ``k8s.io/kubernetes`` and ``sigs.k8s.io/scheduler-plugins`` and replaces every staging
module by its published twin. Every other module Kubernetes requires is pinned to the version
Kubernetes requires (scheduler-plugins asks newer go-spew, jsonreference, go-difflib and x/exp:
each would change the build key of most of the Kubernetes packages, and this build would
share nothing with kube-scheduler's). The plugin release is the one built against the suite's
Kubernetes (``SCHEDULER_PLUGINS``'s go.mod requires k8s.io/kubernetes v1.35.4); rebuilt when
``main.go`` or the versions change (hash stamp).

Run as ``python -m tests.kube.nrtschedbuild`` or let the fixture call ``ensure_nrt_scheduler()``.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

from tests.kube.gobuild import (
    BuildError,
    _build,
    _go,
    _upstream_go_mod,
    bin_dir,
    build_digest,
    is_current,
    kube_module,
    stamp,
)

KUBERNETES = "v1.35.4"
SCHEDULER_PLUGINS = "v0.35.4-devel"
"""The newest scheduler-plugins tag on the Go proxy that requires k8s.io/kubernetes v1.35.4
(the proxy serves tags by name; it refuses the module's version list)."""
SOURCE = Path(__file__).resolve().parent / "nrtscheduler" / "main.go"
NAME = "nrt-scheduler"

__all__ = ["SCHEDULER_PLUGINS", "BuildError", "ensure_nrt_scheduler", "nrt_scheduler_path"]


def requires() -> tuple[str, ...]:
    return (f"k8s.io/kubernetes@{KUBERNETES}", f"sigs.k8s.io/scheduler-plugins@{SCHEDULER_PLUGINS}")


def nrt_scheduler_path() -> Path:
    return bin_dir() / f"{NAME}-{SCHEDULER_PLUGINS}"


def ensure_nrt_scheduler() -> Path:
    """The binary, built when missing or stale; raises ``BuildError`` when impossible."""
    out = nrt_scheduler_path()
    digest = build_digest(SOURCE.read_bytes(), *requires())
    if is_current(out, digest):
        return out
    workdir = kube_module(NAME, KUBERNETES)
    _pin_to_kubernetes(workdir)
    shutil.copy(SOURCE, workdir / "main.go")
    _go(workdir, "get", *requires())
    _build(workdir, ".", out)
    stamp(out, digest)
    return out


def _pin_to_kubernetes(workdir: Path) -> None:
    """Replaces every module k8s.io/kubernetes requires (but its staging ones, replaced
    already) by the version it requires."""
    upstream = _upstream_go_mod(workdir, KUBERNETES)
    pins = re.findall(r"^\t([\w./-]+) (v[^\s]+)", upstream, re.M)
    lines = "".join(f"\t{m} => {m} {v}\n" for m, v in pins if v != "v0.0.0")
    with (workdir / "go.mod").open("a") as f:
        f.write(f"\nreplace (\n{lines})\n")


if __name__ == "__main__":
    try:
        print(ensure_nrt_scheduler())
    except BuildError as exc:
        sys.exit(f"nrt-scheduler build failed: {exc}")
