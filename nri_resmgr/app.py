"""Assembling the daemon from options: configuration, policy, manager, services."""

from __future__ import annotations

import logging

import trio
import trio_asyncio

from nri_resmgr.cli import Options
from nri_resmgr.config import PolicyDocument, load_file
from nri_resmgr.config.filewatch import ConfigFileWatcher
from nri_resmgr.daemon import Daemon, Service
from nri_resmgr.errors import ConfigError
from nri_resmgr.resmgr.manager import ResourceManager
from nri_resmgr.resmgr.policies import create_policy
from nri_resmgr.resmgr.policy import PolicyEnv

log = logging.getLogger(__name__)


def initial_config(options: Options) -> PolicyDocument:
    """The configuration the daemon starts with; failing here is fatal, as in nri-plugins."""
    if options.config_file is None:
        raise ConfigError(
            "configuration from the cluster (config CRs) is not available in this build; "
            "start with --config-file PATH"
        )
    doc = load_file(options.config_file)
    if options.policy and options.policy != doc.policy_name:
        raise ConfigError(
            f"kind: {options.config_file} configures {doc.kind} ({doc.policy_name}), "
            f"but --policy is {options.policy}"
        )
    return doc


def dra_wanted(options: Options, doc: PolicyDocument) -> bool:
    """``dra.enabled`` unset or false: off. Enabled without cluster access: warn, off."""
    if not doc.spec.dra.enabled:
        return False
    if not options.has_cluster_access or not options.node_name:
        log.warning(
            "spec.dra.enabled is true, but the daemon has no cluster access "
            "(configuration from a local file): DRA stays off"
        )
        return False
    return True


def build_services(
    options: Options, manager: ResourceManager, doc: PolicyDocument
) -> list[Service]:
    from nri_resmgr.nri.service import NriService

    services: list[Service] = [
        NriService(
            manager,
            socket_path=options.nri_socket,
            plugin_name=options.nri_plugin_name,
            plugin_index=options.nri_plugin_index,
        )
    ]
    if options.config_file is not None:
        services.append(ConfigFileWatcher(manager, options.config_file, doc))
    if dra_wanted(options, doc):
        log.warning("DRA is enabled but the kubelet plugin is not available in this build")
    return services


async def run(options: Options) -> int:
    doc = initial_config(options)
    policy = create_policy(doc.policy_name)
    env = PolicyEnv(host_root=options.host_root, node_name=options.node_name)
    manager = ResourceManager(policy, doc.spec, env)
    log.info("policy %s configured from %s", policy.name, options.config_file or "the cluster")
    async with trio_asyncio.open_loop():
        daemon = Daemon(build_services(options, manager, doc), grace=options.shutdown_grace)
        return await daemon.run()


def main(options: Options) -> int:
    try:
        return trio.run(run, options)
    except ConfigError as exc:
        for line in exc.errors:
            log.error("configuration error: %s", line)
        return 2
