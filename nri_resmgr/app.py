"""Assembling the daemon from options: configuration, policy, manager, services."""

from __future__ import annotations

import gc
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import trio

from nri_resmgr.agent.filewatch import ConfigFileWatcher
from nri_resmgr.cli import Options
from nri_resmgr.config import PolicyDocument, load_file
from nri_resmgr.config.draswitch import dra_switch
from nri_resmgr.daemon import Daemon, Service, until_signalled
from nri_resmgr.errors import EXIT_OK, ConfigError, ResmgrError
from nri_resmgr.nri import afterreply, tailtrace
from nri_resmgr.nri.service import NriService
from nri_resmgr.observability.setup import instrumentation_services
from nri_resmgr.policies import create_policy
from nri_resmgr.resmgr.manager import ResourceManager
from nri_resmgr.resmgr.policy import PolicyEnv

if TYPE_CHECKING:  # imported where used: start-up without a cluster never needs them
    from nri_resmgr.agent.agent import ConfigAgent
    from nri_resmgr.kube import KubeClient, KubeObject

log = logging.getLogger(__name__)


def initial_config(options: Options) -> PolicyDocument:
    """The configuration from --config-file; failing here is fatal, as in nri-plugins.

    (With cluster access the first configuration comes from ``ConfigAgent.initial_config``.)
    """
    if options.config_file is None:
        raise ConfigError("--config-file: not given; the configuration comes from the cluster")
    doc = load_file(options.config_file)
    if options.policy and options.policy != doc.policy_name:
        raise ConfigError(
            f"kind: {options.config_file} configures {doc.kind} ({doc.policy_name}), "
            f"but --policy is {options.policy}"
        )
    return doc


def build_services(
    options: Options,
    manager: ResourceManager,
    doc: PolicyDocument,
    agent: ConfigAgent | None = None,
    kube: KubeClient | None = None,
) -> list[Service]:
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
    if agent is not None:
        agent.attach(manager.reconfigure)
        services.append(agent)
    dra = _dra_service(options, manager, doc, kube, agent)
    if dra is not None:
        services.append(dra)
    # First to start, last to stop: the probes answer while everything else starts and stops.
    observability = instrumentation_services(
        manager,
        node_name=options.node_name,
        kube=kube,
        dra=dra is not None,
        generation=lambda: agent.doc.generation if agent and agent.doc else doc.generation,
        nrt_interval=options.nrt_interval,
    )
    if agent is not None:
        report_in_nrt(agent, observability)
    return [*observability, *services]


def report_in_nrt(agent: ConfigAgent, services: Sequence[object]) -> None:
    """This node's configuration report goes into its NodeResourceTopology while that is
    exported (docs/fleet.md); otherwise an Event on the config CR, as by default."""
    from nri_resmgr.agent.report import report_attributes
    from nri_resmgr.observability.nrt import NrtExporter

    nrt = next((s for s in services if isinstance(s, NrtExporter)), None)
    if nrt is None:
        return
    events = agent.events

    def into_nrt(cr_name: str, entry: dict[str, Any]) -> None:
        nrt.set_report(report_attributes(agent.resource, agent.namespace, cr_name, entry))

    for cr_name, entry in agent.status.pending.items():
        if entry is not None:  # the start-up result: written with the first NRT, not after it
            into_nrt(cr_name, entry)

    async def report(
        cr_name: str, cr: KubeObject | None, entry: dict[str, Any], in_cr: bool
    ) -> None:
        if nrt.exporting():
            into_nrt(cr_name, entry)
        else:
            await events.report(cr_name, cr, entry, in_cr)

    agent.report_via(report)


def _dra_service(
    options: Options,
    manager: ResourceManager,
    doc: PolicyDocument,
    kube: KubeClient | None,
    agent: ConfigAgent | None = None,
) -> Service | None:
    switch = dra_switch(doc.spec)
    if not switch.on:
        # Said here, so that a daemon without DRA never imports the DRA stack (start-up).
        log.info("DRA support is disabled")
        return None
    from nri_resmgr.dra.setup import build_dra_plugin

    return build_dra_plugin(
        manager,
        manager.policy.name,
        enabled=True,
        asked_by=switch.asked_by if switch.by_policy else None,
        node_name=options.node_name if options.has_cluster_access else "",
        kube=kube,
        plugins_dir=options.kubelet_plugins_dir,
        registry_dir=options.kubelet_registry_dir,
        cdi_dir=options.cdi_dir,
        state_dir=options.dra_state_dir,
        node=agent.node if agent is not None else None,
    )


def make_manager(options: Options, doc: PolicyDocument) -> ResourceManager:
    policy = create_policy(doc.policy_name)
    env = PolicyEnv(host_root=options.host_root, node_name=options.node_name)
    return ResourceManager(policy, doc.spec, env)


async def run(options: Options) -> int:
    if options.config_file is not None:
        doc = initial_config(options)
        manager = make_manager(options, doc)
        log.info("policy %s configured from %s", manager.policy.name, options.config_file)
        return await run_daemon(options, manager, doc)
    from nri_resmgr.kube import KubeClient, load_config

    async with KubeClient(load_config(options.kubeconfig or None)) as client:
        agent = config_agent(client, options)
        log.info("waiting for the %s configuration of node %s in namespace %s",
                 agent.kind, options.node_name, options.config_namespace)  # fmt: skip
        # One set of watches for the first configuration and every later one.
        async with agent.following():
            started = await until_signalled(
                lambda: agent.initial_config(lambda doc: make_manager(options, doc))
            )
            if started is None:
                return EXIT_OK
            assert agent.doc is not None
            log.info("policy %s configured from %s", started.policy.name, agent.cr_in_force)
            return await run_daemon(options, started, agent.doc, agent, client)


def config_agent(client: KubeClient, options: Options) -> ConfigAgent:
    from nri_resmgr.agent.agent import ConfigAgent

    if not options.policy or not options.node_name:
        raise ConfigError("configuration from the cluster needs --policy and NODE_NAME")
    return ConfigAgent(
        client,
        namespace=options.config_namespace,
        node_name=options.node_name,
        policy_name=options.policy,
        group_label=options.config_group_label,
    )


async def run_daemon(
    options: Options,
    manager: ResourceManager,
    doc: PolicyDocument,
    agent: ConfigAgent | None = None,
    kube: KubeClient | None = None,
) -> int:
    tailtrace.install_from_env()  # opt-in per-request trace (NRI_RESMGR_REQUEST_TRACE)
    afterreply.install_from_env()  # log lines and due collections wait until a reply is out
    if not dra_switch(doc.spec).on:
        # grpclib (DRA) is the only asyncio user, and whether DRA runs cannot change without
        # a restart (draswitch): no asyncio loop, and no trio_asyncio import, at start-up.
        services = build_services(options, manager, doc, agent, kube)
        freeze_startup_heap()
        return await Daemon(services, grace=options.shutdown_grace).run()
    import trio_asyncio

    async with trio_asyncio.open_loop():
        services = build_services(options, manager, doc, agent, kube)
        daemon = Daemon(services, grace=options.shutdown_grace)
        freeze_startup_heap()
        return await daemon.run()


def freeze_startup_heap() -> None:
    """Leave what start-up made (modules, classes, the policy's topology) out of every later
    garbage collection: otherwise each full collection walks it all again, inside whichever
    request triggered it (20-40 ms on a loaded 2-CPU machine, measured in a Synchronize of
    1,000). Objects are still freed by reference counting as before."""
    gc.collect()
    gc.freeze()


def main(options: Options) -> int:
    """Run the daemon; its exit status. An error that ends the daemon before its services
    run is logged as one line (a configuration: one per problem), never a traceback, and
    exits with its status (``errors.EXIT_*``, README "Running"); a traceback is a bug."""
    try:
        return trio.run(run, options)
    except ConfigError as exc:
        for line in exc.errors:
            log.error("configuration error: %s", line)
        return exc.exit_status
    except ResmgrError as exc:
        log.error("cannot start: %s", exc)
        return exc.exit_status
