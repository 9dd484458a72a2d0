"""Regenerate the betterproto code in nri_resmgr/_gen from the .proto files in proto/.

Run through ``nox -s proto``. The output is deterministic for a given betterproto and
grpcio-tools version (both pinned in pyproject.toml), so a regenerated tree diffs clean.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"
OUT_DIR = ROOT / "nri_resmgr" / "_gen"

HEADER = '"""Generated from proto/ by tools/genproto.py (nox -s proto). Do not edit."""\n'


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
    # Every directory must be a package, so the generated modules import by absolute name.
    for d in [OUT_DIR, *sorted(p for p in OUT_DIR.rglob("*") if p.is_dir())]:
        init = d / "__init__.py"
        if not init.exists():
            init.write_text(HEADER)
    print(f"generated {len(protos)} proto files into {OUT_DIR.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
