"""Whether and how the daemon runs the DRA plugin, from the configuration.

``dra.enabled`` unset or false: no plugin. Enabled but without cluster access (no API client
or no node name, e.g. running from a local config file): a warning, and DRA stays off rather
than the daemon refusing to start, since placement through NRI works without it.
"""

from __future__ import annotations

import logging
from pathlib import Path

from nri_resmgr.dra.plugin import (
    KUBELET_PLUGINS_DIR,
    KUBELET_REGISTRY_DIR,
    DraOwner,
    KubeletPlugin,
    driver_name_for,
)
from nri_resmgr.dra.publisher import KubeApi, SlicePublisher

log = logging.getLogger(__name__)


def build_dra_plugin(
    manager: DraOwner,
    policy_name: str,
    *,
    enabled: bool | None,
    node_name: str,
    kube: KubeApi | None,
    plugins_dir: str | Path = KUBELET_PLUGINS_DIR,
    registry_dir: str | Path = KUBELET_REGISTRY_DIR,
) -> KubeletPlugin | None:
    """The DRA plugin service to start, or None when DRA stays off."""
    if not enabled:
        log.info("DRA support is disabled")
        return None
    missing = [what for what, ok in (("node name", node_name), ("API client", kube)) if not ok]
    if missing or kube is None:
        log.warning(
            "dra.enabled is true but there is no %s (no cluster access); DRA stays off",
            " and no ".join(missing),
        )
        return None
    driver = driver_name_for(policy_name)
    publisher = SlicePublisher(kube, manager.dra_devices, driver, node_name)
    return KubeletPlugin(
        manager, driver, plugins_dir, registry_dir, node_name=node_name, publisher=publisher
    )
