"""Regenerate the betterproto code in nri_resmgr/_gen from the .proto files in proto/.

Run through ``nox -s proto``. The output is deterministic for a given betterproto and
grpcio-tools version (both pinned in pyproject.toml), so a regenerated tree diffs clean.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"
OUT_DIR = ROOT / "nri_resmgr" / "_gen"

HEADER = '"""Generated from proto/ by tools/genproto.py (nox -s proto). Do not edit."""\n'
# Spoken over ttrpc, not gRPC: their generated gRPC service classes are never used, and
# importing grpclib for them was 8% of the daemon's start-up (python -X importtime).
TTRPC_ONLY = ("nri/pkg/api/v1alpha1/__init__.py",)
_GRPC_IMPORTS = (
    "import grpclib\n",
    "from betterproto.grpc.grpclib_server import ServiceBase\n",
    "    import grpclib.server\n",
    "    from betterproto.grpc.grpclib_client import MetadataLike\n",
    "    from grpclib.metadata import Deadline\n",
)
_FIRST_SERVICE = re.compile(r"^class \w+\(betterproto\.ServiceStub\):$", re.MULTILINE)


def without_grpc_services(source: str) -> str:
    """``source`` less its gRPC service classes (all generated after the messages) and
    the grpclib imports they need."""
    found = _FIRST_SERVICE.search(source)
    if found is not None:
        source = source[: found.start()].rstrip() + "\n"
    for line in _GRPC_IMPORTS:
        source = source.replace(line, "", 1)
    source = source.replace("\nif TYPE_CHECKING:\n\n", "\n", 1)  # left empty
    if "grpclib" in source or "ServiceBase" in source:
        raise RuntimeError("a ttrpc-only module still needs grpclib: update genproto.py")
    return source


def main() -> int:
    protos = sorted(str(p.relative_to(PROTO_DIR)) for p in PROTO_DIR.rglob("*.proto"))
    if not protos:
        print("no .proto files under proto/", file=sys.stderr)
        return 1
    shutil.rmtree(OUT_DIR, ignore_errors=True)
    OUT_DIR.mkdir(parents=True)
    cmd = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{PROTO_DIR}",
        f"--python_betterproto_out={OUT_DIR}",
        *protos,
    ]
    # protoc finds the betterproto plugin on PATH; the venv's bin may not be on it.
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    subprocess.run(cmd, check=True, cwd=PROTO_DIR, env=env)
    for name in TTRPC_ONLY:
        module = OUT_DIR / name
        module.write_text(without_grpc_services(module.read_text()))
    # Every directory must be a package, so the generated modules import by absolute name.
    for d in [OUT_DIR, *sorted(p for p in OUT_DIR.rglob("*") if p.is_dir())]:
        init = d / "__init__.py"
        if not init.exists():
            init.write_text(HEADER)
    print(f"generated {len(protos)} proto files into {OUT_DIR.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
