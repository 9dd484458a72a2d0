"""A minimal OCI image made by hand: Debian's static busybox, its applet links and a
``/pause`` script, packed as an OCI image-layout tar that ``ctr images import`` accepts.

No registry is reachable from the test machines, so the same image is both the pinned
sandbox image and the workload (``/bin/sleep``). The archive is deterministic (mtime 0,
sorted entries), so its digest is stable across runs and the cached copy is reused.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

IMAGE_NAME = "localhost/nri-resmgr-test/busybox:1"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar"
# PID 1 ignores signals it has no handler for: trap them, so a sandbox stops promptly.
PAUSE = b"#!/bin/sh\ntrap 'exit 0' TERM INT\nsleep 2147483647 &\nwait\n"


def _entry(
    tar: tarfile.TarFile,
    name: str,
    kind: bytes,
    data: bytes = b"",
    mode: int = 0o755,
    link: str = "",
) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime, info.linkname = kind, mode, 0, link
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data) if data else None)


def _layer(busybox: Path) -> bytes:
    applets = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("bin", "dev", "etc", "proc", "sys", "tmp", "host", "var", "var/run"):
            _entry(tar, d, tarfile.DIRTYPE)
        _entry(tar, "bin/busybox", tarfile.REGTYPE, busybox.read_bytes())
        for name in sorted(set(applets.stdout.split()) - {"busybox"}):
            _entry(tar, f"bin/{name}", tarfile.SYMTYPE, link="busybox", mode=0o777)
        _entry(tar, "pause", tarfile.REGTYPE, PAUSE)
    return buf.getvalue()


def _blob(tar: tarfile.TarFile, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    _entry(tar, f"blobs/sha256/{digest}", tarfile.REGTYPE, data, mode=0o644)
    return f"sha256:{digest}"


def _json(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def make_image(out: Path) -> Path:
    """The image archive at ``out`` (made once; reused while busybox is unchanged)."""
    busybox = Path(shutil.which("busybox") or "/bin/busybox")
    layer = _layer(busybox)
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    stamp = out.with_suffix(".id")
    if out.exists() and stamp.exists() and stamp.read_text() == diff_id:
        return out
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": ["/pause"], "Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }
    tmp = out.with_suffix(".tmp")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _entry(tar, "blobs", tarfile.DIRTYPE)
        _entry(tar, "blobs/sha256", tarfile.DIRTYPE)
        layer_digest = _blob(tar, layer)
        config_bytes = _json(config)
        config_digest = _blob(tar, config_bytes)
        manifest = _json(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {
                    "mediaType": "application/vnd.oci.image.config.v1+json",
                    "digest": config_digest,
                    "size": len(config_bytes),
                },
                "layers": [{"mediaType": LAYER_TYPE, "digest": layer_digest, "size": len(layer)}],
            }
        )
        manifest_digest = _blob(tar, manifest)
        index = {
            "schemaVersion": 2,
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": manifest_digest,
                    "size": len(manifest),
                    "platform": {"architecture": "amd64", "os": "linux"},
                    "annotations": {
                        "io.containerd.image.name": IMAGE_NAME,
                        "org.opencontainers.image.ref.name": "1",
                    },
                }
            ],
        }
        _entry(tar, "oci-layout", tarfile.REGTYPE, _json({"imageLayoutVersion": "1.0.0"}), 0o644)
        _entry(tar, "index.json", tarfile.REGTYPE, _json(index), 0o644)
    tmp.replace(out)
    out.with_suffix(".id").write_text(diff_id)
    return out
