"""Copy the topology part of a machine's ``/sys`` into a fixture tree (a test tool).

Only what topology discovery could read is copied: the CPU lists and per-CPU topology and
cache files, and the NUMA node lists, cpulists, distances and meminfo. Nothing else of the
machine (no device, power or vulnerability files) ends up in the repository.

    python -m tests.sysfs.capture tests/sysfs/fixtures/<name>
"""

from __future__ import annotations

import sys
from pathlib import Path

PATTERNS = (
    "devices/system/cpu/online",
    "devices/system/cpu/possible",
    "devices/system/cpu/present",
    "devices/system/cpu/offline",
    "devices/system/cpu/isolated",
    "devices/system/cpu/kernel_max",
    "devices/system/cpu/smt/active",
    "devices/system/cpu/smt/control",
    "devices/system/cpu/cpu[0-9]*/online",
    "devices/system/cpu/cpu[0-9]*/topology/*",
    "devices/system/cpu/cpu[0-9]*/cache/index[0-9]*/*",
    "devices/system/node/online",
    "devices/system/node/possible",
    "devices/system/node/has_cpu",
    "devices/system/node/has_memory",
    "devices/system/node/has_normal_memory",
    "devices/system/node/node[0-9]*/cpulist",
    "devices/system/node/node[0-9]*/cpumap",
    "devices/system/node/node[0-9]*/distance",
    "devices/system/node/node[0-9]*/meminfo",
)
SKIP = frozenset({"uevent"})


def capture(source: Path, dest: Path) -> int:
    """Copies the matching regular files from ``source`` (a ``/sys``) to ``dest/sys``."""
    copied = 0
    for pattern in PATTERNS:
        for path in sorted(source.glob(pattern)):
            if path.name in SKIP or not path.is_file():
                continue
            try:
                data = path.read_bytes()
            except OSError:
                continue  # write-only or permission-restricted attributes
            target = dest / "sys" / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            copied += 1
    return copied


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    count = capture(Path("/sys"), Path(sys.argv[1]))
    print(f"copied {count} files")
