"""``nri-resmgr simulate`` and ``nri-resmgr snapshot-topology``.

Exit codes of ``simulate``: 0 when every container was placed and every document used, 1
when something failed or was skipped (the output says what), 2 when the run could not
start (unreadable or refused configuration, unknown machine, unreadable workload).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import trio

from nri_resmgr.config import PolicyDocument, load_document
from nri_resmgr.config.documents import parse_yaml
from nri_resmgr.config.models import GROUP_VERSION, SPEC_BY_POLICY
from nri_resmgr.errors import ConfigError, ResmgrError
from nri_resmgr.sim.bounds import check_yaml
from nri_resmgr.sim.kubelet import CGROUP_DRIVERS
from nri_resmgr.sim.machine import known_machines, open_machine
from nri_resmgr.sim.plot import plot, require_matplotlib
from nri_resmgr.sim.report import render_json, render_table
from nri_resmgr.sim.runner import simulate
from nri_resmgr.sim.snapshot import take_snapshot
from nri_resmgr.sim.workload import WorkloadError, parse_workload

__all__ = ["load_config", "main", "snapshot_main"]

EXIT_CLEAN, EXIT_FAILURES, EXIT_USAGE = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="nri-resmgr simulate",
        description="Where would these pods land on that machine with this config? Runs the "
        "workload through the real policy behind a simulated runtime and prints the placement.",
    )
    p.add_argument(
        "--config",
        required=True,
        metavar="CFG.yaml",
        help="a policy CR document (as --config-file takes), or a helm values file whose "
        "config: section is the spec (then --policy names the policy)",
    )
    p.add_argument(
        "--workload",
        required=True,
        metavar="PODS.yaml",
        help="Pod manifests (multi-document YAML or kubectl get pods -o yaml), optionally "
        "followed by Remove steps and policy CR documents (config changes); '-' reads stdin",
    )
    p.add_argument(
        "--machine",
        default="host",
        metavar="host|NAME|SNAPSHOT",
        help=f"this host, a synthetic topology ({', '.join(known_machines()[1:])}), or a "
        "tar.gz from 'nri-resmgr snapshot-topology' (default: host)",
    )
    p.add_argument("--policy", choices=sorted(SPEC_BY_POLICY), help="for a helm values file")
    p.add_argument("--output", choices=("table", "json"), default="table")
    p.add_argument("--plot", metavar="OUT.png|OUT.svg", help="draw the placement picture")
    p.add_argument(
        "--cgroup-driver",
        choices=CGROUP_DRIVERS,
        default="cgroupfs",
        help="kubelet's cgroup driver (shapes the pod cgroup parents)",
    )
    p.add_argument("--host-root", default="", help="with --machine host: prefix for /sys, /proc")
    return p


def load_config(path: str, policy: str | None = None) -> PolicyDocument:
    """A policy CR document, or a helm values file's ``config:`` section with ``policy``."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file: {exc.strerror or exc}") from exc
    check_yaml(text, path)
    data = parse_yaml(text, path)
    if isinstance(data, Mapping) and "apiVersion" not in data and "config" in data:
        return _from_helm_values(data["config"], path, policy)
    doc = load_document(data)
    if policy and policy != doc.policy_name:
        raise ConfigError(f"kind: {path} configures {doc.policy_name}, but --policy is {policy}")
    return doc


def _from_helm_values(config: Any, path: str, policy: str | None) -> PolicyDocument:
    if policy is None:
        raise ConfigError(
            f"{path}: a helm values file does not say its policy; add --policy "
            f"({', '.join(sorted(SPEC_BY_POLICY))})"
        )
    kind = SPEC_BY_POLICY[policy].kind
    try:
        return load_document({"apiVersion": GROUP_VERSION, "kind": kind, "spec": config})
    except ConfigError as exc:
        # The spec's keys sit under config: in a values file; say so in every path.
        raise ConfigError([e.replace("spec", "config", 1) for e in exc.errors]) from exc


def _read_workload(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read workload: {exc.strerror or exc}") from exc


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.plot:
            require_matplotlib()  # before the run, not after its output
        doc = load_config(args.config, args.policy)
        workload = parse_workload(_read_workload(args.workload), args.workload)
        with (
            open_machine(args.machine, args.host_root) as machine,
            tempfile.TemporaryDirectory(prefix="nri-resmgr-simulate-") as tmp,
        ):
            result = trio.run(simulate, machine, doc, workload, Path(tmp), args.cgroup_driver)
            print(render_json(result) if args.output == "json" else render_table(result))
            if args.plot:
                plot(result, Path(args.plot))
                print(f"nri-resmgr simulate: wrote {args.plot}", file=sys.stderr)
    except ConfigError as exc:
        for line in exc.errors:
            print(f"nri-resmgr simulate: configuration error: {line}", file=sys.stderr)
        return EXIT_USAGE
    except ResmgrError as exc:
        print(f"nri-resmgr simulate: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_CLEAN if result.clean else EXIT_FAILURES


def snapshot_main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        prog="nri-resmgr snapshot-topology",
        description="Write this node's CPU/NUMA topology (the sysfs/procfs files the policies "
        "read, nothing else) as tar.gz, for 'nri-resmgr simulate --machine FILE'.",
    )
    p.add_argument("--host-root", default="", help="prefix for /sys and /proc (in a container)")
    p.add_argument("--output", "-o", default="-", help="file to write (default: stdout)")
    args = p.parse_args(argv)
    try:
        data = take_snapshot(args.host_root)
    except ResmgrError as exc:
        print(f"nri-resmgr snapshot-topology: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.output == "-":
        if sys.stdout.isatty():
            print(
                "nri-resmgr snapshot-topology: refusing to write gzip to a terminal; "
                "redirect it (> node.tar.gz) or use -o FILE",
                file=sys.stderr,
            )
            return EXIT_USAGE
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:
        Path(args.output).write_bytes(data)
    return EXIT_CLEAN
