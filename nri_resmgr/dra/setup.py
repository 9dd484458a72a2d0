"""Whether and how the daemon runs the DRA plugin, from the configuration.

DRA off (``dra.enabled`` false, or unset while no policy key asks for devices:
``config.draswitch``): no plugin. On but without cluster access (no API client or no node
name, e.g. running from a local config file): a warning naming the key that turned it on,
and DRA stays off rather than the daemon refusing to start, since placement through NRI
works without it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from nri_resmgr.dra.cpu.cdi import CdiWriter
from nri_resmgr.dra.cpu.driver import CpuDriver, driver_name_for
from nri_resmgr.dra.cpu.state import ClaimStore
from nri_resmgr.dra.kubeletplugin import (
    CDI_DIR,
    KUBELET_PLUGINS_DIR,
    KUBELET_REGISTRY_DIR,
    KubeletPlugin,
    SlicePublisher,
)
from nri_resmgr.dra.kubeletplugin.publisher import NodeSource
from nri_resmgr.kube.api import KubeApi
from nri_resmgr.resmgr.manager import ResourceManager

STATE_DIR = "/run/nri-resmgr"
"""A tmpfs on every systemd host: the record only has to outlive the daemon (``dra.cpu.state``)."""

log = logging.getLogger(__name__)


def build_dra_plugin(
    manager: ResourceManager,
    policy_name: str,
    *,
    enabled: bool,
    asked_by: str | None = None,
    node_name: str,
    kube: KubeApi | None,
    plugins_dir: str | Path = KUBELET_PLUGINS_DIR,
    registry_dir: str | Path = KUBELET_REGISTRY_DIR,
    cdi_dir: str | Path = CDI_DIR,
    state_dir: str | Path = STATE_DIR,
    node: NodeSource | None = None,
) -> KubeletPlugin | None:
    """The DRA plugin service to start, or None when DRA stays off. ``node``: the Node as
    the daemon follows it, so the publisher needs no GET for its UID. ``enabled``: the
    effective ``dra.enabled`` (``config.draswitch``); ``asked_by``: the policy key that
    turned it on, ``dra.enabled`` being unset (None: it is true)."""
    if not enabled:
        log.info("DRA support is disabled")
        return None
    turned_on = (
        "dra.enabled is true"
        if asked_by is None
        else f"{asked_by} asks for devices and dra.enabled is unset"
    )
    missing = [what for what, ok in (("node name", node_name), ("API client", kube)) if not ok]
    if missing or kube is None:
        log.warning(
            "%s but there is no %s (no cluster access); DRA stays off",
            turned_on,
            " and no ".join(missing),
        )
        return None
    if asked_by is not None:
        log.info("DRA support is enabled: %s", turned_on)
    driver_name = driver_name_for(policy_name)
    driver = CpuDriver(
        manager, driver_name, node_name, ClaimStore(state_dir), CdiWriter(cdi_dir, driver_name)
    )
    # Before anything serves: Synchronize must already know the prepared claims.
    driver.restore(manager.policy)
    publisher = SlicePublisher(kube, driver.devices, driver_name, node_name, node=node)
    manager.reconfigure_hooks.append(_republish_after(publisher))
    # Devices that change with what containers hold (balloons' capacity) are republished too.
    manager.policy.devices_changed = publisher.trigger
    return KubeletPlugin(
        driver, driver_name, kube, plugins_dir, registry_dir, publisher=publisher, cdi_dir=cdi_dir
    )


def _republish_after(publisher: SlicePublisher) -> Callable[[object], Callable[[bool], None]]:
    """A reconfigure hook: an applied configuration may change the devices (reserved CPUs)."""

    def hook(_spec: object) -> Callable[[bool], None]:
        def finish(applied: bool) -> None:
            if applied:
                publisher.trigger()

        return finish

    return hook
