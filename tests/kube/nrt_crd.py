"""The NodeResourceTopology CRD, from the Go module of the NRT API project, fetched at test
time with ``go mod download`` into Go's module cache (never committed)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import trio
import yaml

from nri_resmgr.kube import AlreadyExists, KubeClient
from nri_resmgr.kube.resources import CUSTOM_RESOURCE_DEFINITIONS
from tests.kube.gobuild import BuildError, cache_dir

NRT_MODULE = "github.com/k8stopologyawareschedwg/noderesourcetopology-api"
NRT_VERSION = "v0.1.3"  # the version nri-plugins' go.mod requires


def nrt_crd() -> dict[str, Any]:
    if shutil.which("go") is None:
        raise BuildError("the Go toolchain (go) is not on PATH: cannot fetch the NRT CRD")
    workdir = cache_dir() / "build" / "nrt-crd"
    workdir.mkdir(parents=True, exist_ok=True)
    gomod = workdir / "go.mod"
    if not gomod.exists():
        gomod.write_text("module nri-resmgr.local/build/nrt-crd\n\ngo 1.25.0\n")
    env = os.environ | {"GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}
    proc = subprocess.run(
        ["go", "mod", "download", "-json", f"{NRT_MODULE}@{NRT_VERSION}"],
        cwd=workdir, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise BuildError(f"go mod download {NRT_MODULE}@{NRT_VERSION} failed:\n{proc.stderr}")
    path = Path(json.loads(proc.stdout)["Dir"]) / "manifests" / "crd.yaml"
    crd: dict[str, Any] = yaml.safe_load(path.read_text())
    return crd


async def install_nrt_crd(kube: KubeClient) -> None:
    """Creates the CRD (once per apiserver) and returns when the API serves it."""
    crd = nrt_crd()
    with contextlib.suppress(AlreadyExists):
        await kube.create(CUSTOM_RESOURCE_DEFINITIONS, crd)
    with trio.fail_after(60):
        while True:
            got = await kube.get(CUSTOM_RESOURCE_DEFINITIONS, crd["metadata"]["name"])
            conditions = (got.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return
            await trio.sleep(0.1)
