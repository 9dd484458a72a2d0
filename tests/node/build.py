"""Build everything the real node needs ahead of the tests (``python -m tests.node.build``):
the guest image, containerd 2.4 with crictl, the project's site-packages, the test image and
upstream's topology-aware plugin. Each is cached under ``$NRI_RESMGR_CACHE``; a second run
only checks the caches."""

from __future__ import annotations

import sys
import time

from tests.bench.gopeer import ensure_go_topology_aware
from tests.node.image import ensure_image
from tests.node.payload import image_tarball, project_tarball, runtime_tarball


def main() -> None:
    for step in (ensure_image, runtime_tarball, project_tarball, image_tarball,
                 ensure_go_topology_aware):  # fmt: skip
        started = time.monotonic()
        print(f"{step.__name__}: {step()} ({time.monotonic() - started:.0f}s)", file=sys.stderr)


if __name__ == "__main__":
    main()
