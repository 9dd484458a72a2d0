"""``--machine``: this host, a named synthetic topology, or a topology snapshot file.

Each becomes a host root (a directory holding ``sys/`` and ``proc/``) that the policy reads
through its usual discovery, as ``--host-root`` does for the daemon.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import attrs

from nri_resmgr.errors import ResmgrError
from nri_resmgr.sim.snapshot import extract_snapshot
from nri_resmgr.sim.synthetic import TOPOLOGIES, Layout, write_sysfs
from nri_resmgr.sysfs import System, discover

__all__ = [
    "HOST",
    "MACHINES",
    "UPSTREAM_TOPOLOGIES",
    "Machine",
    "MachineError",
    "known_machines",
    "open_machine",
]

HOST = "host"
UPSTREAM_TOPOLOGIES = {
    # The nri-plugins e2e topologies that sysfs.synthetic does not already have
    # (test/e2e/policies.test-suite/topology-aware/<name>/topology.var.json).
    "n4c128": Layout(packages=2, nodes_per_die=2, cores_per_node=16, threads=2),
    "s8c4k": Layout(packages=8, cores_per_node=512, threads=1),
}
MACHINES = {**TOPOLOGIES, **UPSTREAM_TOPOLOGIES}


class MachineError(ResmgrError):
    """``--machine`` names nothing we know."""


@attrs.frozen
class Machine:
    name: str
    """What the operator asked for: ``host``, a topology name, or the snapshot path."""
    kind: str
    """``host``, ``synthetic`` or ``snapshot``."""
    host_root: str
    system: System
    description: str
    """One line for the table header: ``synthetic n4c16`` or ``snapshot of node-7 (...)``."""


def known_machines() -> list[str]:
    return [HOST, *sorted(MACHINES)]


@contextmanager
def open_machine(name: str, host_root: str = "") -> Iterator[Machine]:
    """The machine, readable as a host root until the context ends."""
    if name == HOST:
        yield Machine(name, "host", host_root, discover(host_root), "this host")
        return
    with tempfile.TemporaryDirectory(prefix="nri-resmgr-machine-") as tmp:
        root = Path(tmp)
        if name in MACHINES:
            write_sysfs(root, MACHINES[name])
            yield Machine(name, "synthetic", tmp, discover(tmp), f"synthetic {name}")
            return
        path = Path(name)
        if not path.is_file():
            known = ", ".join(known_machines())
            raise MachineError(
                f"--machine {name!r}: not a known machine ({known}) nor a snapshot file"
            )
        manifest = extract_snapshot(path, root)
        origin = manifest.get("hostname") or "unknown node"
        yield Machine(name, "snapshot", tmp, discover(tmp), f"snapshot of {origin} ({path.name})")
