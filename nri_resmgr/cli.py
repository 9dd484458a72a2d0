"""Command line: the flags users of the Go nri-plugins know, plus a few of our own."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence

import attrs

from nri_resmgr import __version__
from nri_resmgr.errors import UsageError as UsageError
from nri_resmgr.nri.service import ENV_PLUGIN_IDX, ENV_PLUGIN_NAME, identity_errors

DEFAULT_NRI_SOCKET = "/var/run/nri/nri.sock"
DEFAULT_PLUGIN_NAME = "resource-manager"
DEFAULT_PLUGIN_INDEX = "90"
DEFAULT_PLUGINS_DIR = "/var/lib/kubelet/plugins"
DEFAULT_REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"
POLICY_NAMES = ("topology-aware", "balloons", "template")
LOG_LEVELS = ("debug", "info", "warning", "error")


@attrs.frozen
class Options:
    config_file: str | None = None
    kubeconfig: str = ""
    config_namespace: str = "kube-system"
    config_group_label: str = "config.nri/group"
    policy: str | None = None
    nri_socket: str = DEFAULT_NRI_SOCKET
    nri_plugin_name: str = DEFAULT_PLUGIN_NAME
    nri_plugin_index: str = DEFAULT_PLUGIN_INDEX
    host_root: str = ""
    node_name: str = ""
    log_level: str = "info"
    kubelet_plugins_dir: str = DEFAULT_PLUGINS_DIR
    kubelet_registry_dir: str = DEFAULT_REGISTRY_DIR
    cdi_dir: str = "/var/run/cdi"
    dra_state_dir: str = "/run/nri-resmgr"
    shutdown_grace: float = 10.0
    nrt_interval: float = 2.0

    @property
    def has_cluster_access(self) -> bool:
        """A local config file means no cluster access at all, as in nri-plugins."""
        return self.config_file is None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="nri-resmgr",
        description="Node resource manager for Kubernetes: NRI plugin and DRA driver.",
    )
    p.add_argument("--version", action="version", version=f"nri-resmgr {__version__}")
    p.add_argument(
        "--config-file",
        metavar="PATH",
        help="policy configuration from a local YAML file (a policy CR document); "
        "the daemon then has no cluster access",
    )
    p.add_argument(
        "--kubeconfig",
        default="",
        metavar="PATH",
        help="kubeconfig for cluster access (empty: in-cluster config)",
    )
    p.add_argument(
        "--config-namespace",
        default="kube-system",
        help="namespace of the policy configuration CRs",
    )
    p.add_argument(
        "--config-group-label",
        default="config.nri/group",
        help="node label naming the node's configuration group",
    )
    p.add_argument(
        "--policy",
        choices=POLICY_NAMES,
        help="the active policy (with --config-file: taken from the file's kind)",
    )
    p.add_argument(
        "--nri-socket",
        default=None,
        metavar="PATH",
        help=f"the runtime's NRI socket (default {DEFAULT_NRI_SOCKET})",
    )
    p.add_argument(
        "--nri-plugin-name",
        default=None,
        help=f"NRI plugin name (env NRI_PLUGIN_NAME, default {DEFAULT_PLUGIN_NAME})",
    )
    p.add_argument(
        "--nri-plugin-index",
        default=None,
        help=f"NRI plugin index, two digits (env NRI_PLUGIN_IDX, default {DEFAULT_PLUGIN_INDEX})",
    )
    p.add_argument(
        "--host-root", default="", help="prefix for /sys and /proc when running in a container"
    )
    p.add_argument("--log-level", default="info", choices=LOG_LEVELS)
    p.add_argument(
        "--kubelet-plugins-dir",
        default=DEFAULT_PLUGINS_DIR,
        help="directory of kubelet plugin sockets (DRA)",
    )
    p.add_argument(
        "--kubelet-registry-dir",
        default=DEFAULT_REGISTRY_DIR,
        help="kubelet plugin registration directory (DRA)",
    )
    p.add_argument(
        "--cdi-dir",
        default="/var/run/cdi",
        help="directory for the per-claim CDI specs (DRA)",
    )
    p.add_argument(
        "--dra-state-dir",
        default="/run/nri-resmgr",
        help="directory of the prepared-claims state file (DRA)",
    )
    p.add_argument(
        "--shutdown-grace",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long stopping services may take before they are cancelled",
    )
    p.add_argument(
        "--nrt-interval",
        type=positive_seconds,
        default=2.0,
        metavar="SECONDS",
        help="least time between two writes of the node's NodeResourceTopology (changes in "
        "between are written together); see docs/fleet.md",
    )
    return p


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, not {text}")
    return value


def parse_options(argv: Sequence[str], env: Mapping[str, str] = os.environ) -> Options:
    """Flags, then the NRI environment variables, then defaults; checked at the edge."""
    ns = build_parser().parse_args(argv)
    name = ns.nri_plugin_name or env.get(ENV_PLUGIN_NAME) or DEFAULT_PLUGIN_NAME
    index = ns.nri_plugin_index or env.get(ENV_PLUGIN_IDX) or DEFAULT_PLUGIN_INDEX
    problems = identity_errors(name, index)
    if problems:
        raise UsageError("; ".join(problems))
    options = Options(
        config_file=ns.config_file,
        kubeconfig=ns.kubeconfig,
        config_namespace=ns.config_namespace,
        config_group_label=ns.config_group_label,
        policy=ns.policy,
        nri_socket=ns.nri_socket or DEFAULT_NRI_SOCKET,
        nri_plugin_name=name,
        nri_plugin_index=index,
        host_root=ns.host_root,
        node_name=env.get("NODE_NAME", ""),
        log_level=ns.log_level,
        kubelet_plugins_dir=ns.kubelet_plugins_dir,
        kubelet_registry_dir=ns.kubelet_registry_dir,
        cdi_dir=ns.cdi_dir,
        dra_state_dir=ns.dra_state_dir,
        shutdown_grace=ns.shutdown_grace,
        nrt_interval=ns.nrt_interval,
    )
    if options.has_cluster_access:
        if not options.node_name:
            raise UsageError("NODE_NAME is not set: it is required unless --config-file is given")
        if not options.policy:
            raise UsageError("--policy is required unless --config-file is given")
    return options
