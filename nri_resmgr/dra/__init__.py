"""The DRA kubelet plugin: node infrastructure owned by the resource manager.

Which devices exist and which CPUs a claim stands for is the policy's business
(``ResourceManager.dra_devices/claim_cpus/release_claim``); this package reads the claims,
writes their CDI specs and records (``claims``, ``cdi``, ``state``) and publishes the slices.
"""

from nri_resmgr.dra.plugin import KubeletPlugin, driver_name_for
from nri_resmgr.dra.publisher import SlicePublisher

__all__ = ["KubeletPlugin", "SlicePublisher", "driver_name_for"]
